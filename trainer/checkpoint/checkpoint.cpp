#include "checkpoint.h"

#include <simdjson.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/log.h"
#include "loom/sys.h"

namespace loom {

namespace {

constexpr const char* kManifest = "manifest.json";

using FileEntry = CheckpointFile;

void write_text(const std::string& path, const std::string& text, std::vector<FileEntry>& files) {
  sys::AtomicFile f(path);
  f.write(text);
  f.commit();
  files.push_back({sys::basename(path), text.size(), xxh64(text.data(), text.size())});
}

}  // namespace

int64_t parse_step_name(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::string checkpoint_tokenizer(const std::string& dir, const std::string& given) {
  const std::string own = dir + "/" + kCheckpointTokenizer;
  if (!sys::exists(own)) return given;
  if (given.empty()) return own;
  const uint64_t a = xxh64_file(given), b = xxh64_file(own);
  LOOM_CHECK(a == b, given, ": not the tokenizer ", dir, " was trained with (XXH64 ", hex64(a), ", its ",
             kCheckpointTokenizer, " has ", hex64(b), "); leave --tokenizer out to use the checkpoint's");
  return given;
}

std::string checkpoint_dir_name(int64_t step) { return "step_" + std::to_string(step); }

std::optional<CheckpointFile> write_shard(const std::string& dir, const CheckpointContents& c) {
  if (c.shard_name.empty()) return std::nullopt;
  const safetensors::WriteResult w = safetensors::write(dir + "/" + c.shard_name, c.shard, c.shard_metadata);
  return CheckpointFile{c.shard_name, w.bytes, w.xxh64};
}

std::string zero1_shard_name(int shard) { return "optimizer_zero1_" + std::to_string(shard) + ".safetensors"; }

std::vector<std::string> zero1_shard_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& f : sys::list_files(dir)) {
    const std::string name = sys::basename(f);
    if (sys::dirname(f) == dir && name.rfind("optimizer_zero1_", 0) == 0) out.push_back(f);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
// Removes a folder loom wrote, never through a link: a link inside it is removed as a link, and
// what it points to is left alone.
void remove_tree_no_follow(const std::string& dir) {
  for (const auto& name : sys::list_dir(dir)) {
    const std::string p = dir + "/" + name;
    if (!sys::is_symlink(p) && sys::is_directory(p)) remove_tree_no_follow(p);
    else sys::remove_file(p);
  }
  sys::remove_dir(dir);
}
}  // namespace

void remove_checkpoint_dir(const std::string& dir) {
  if (!sys::lexists(dir)) return;
  LOOM_CHECK(!sys::is_symlink(dir), dir, ": a symbolic link where loom keeps a checkpoint folder of its own; loom "
             "removes only folders it wrote, never what a link points to (remove the link, or choose another ",
             "ckpt.save_ckpt_folder)");
  remove_tree_no_follow(dir);
}

int64_t validate_checkpoint(const std::string& dir) {
  const std::string manifest_path = dir + "/" + kManifest;
  LOOM_CHECK(sys::exists(manifest_path), dir, ": no ", kManifest, " (an incomplete checkpoint)");
  const std::string text = sys::read_file(manifest_path);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  auto err = parser.parse(padded).get(root);
  LOOM_CHECK(!err, manifest_path, ": not valid JSON: ", simdjson::error_message(err));
  std::string_view format;
  LOOM_CHECK(!root["format"].get(format) && format == kCheckpointFormat, manifest_path, ": format is not '",
             kCheckpointFormat, "'");
  int64_t version = 0, step = 0;
  LOOM_CHECK(!root["version"].get(version), manifest_path, ": missing integer 'version'");
  LOOM_CHECK(version == kCheckpointVersion, manifest_path, ": checkpoint version ", version,
             ", this build reads version ", kCheckpointVersion);
  LOOM_CHECK(!root["step"].get(step) && step >= 0, manifest_path, ": missing integer 'step'");
  simdjson::dom::array files;
  LOOM_CHECK(!root["files"].get(files), manifest_path, ": missing array 'files'");
  std::set<std::string> names;
  for (auto f : files) {
    std::string_view name, hex;
    uint64_t bytes = 0;
    LOOM_CHECK(!f["name"].get(name) && !f["bytes"].get(bytes) && !f["xxh64"].get(hex), manifest_path,
               ": a files entry lacks name, bytes or xxh64");
    // A plain file name: a listed "../x" or "a/b" would be read (and trusted) outside the folder.
    LOOM_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
                   name.find('\0') == std::string_view::npos,
               manifest_path, ": file name '", std::string(name), "' is not a plain name inside the checkpoint folder");
    const std::string path = dir + "/" + std::string(name);
    LOOM_CHECK(sys::exists(path), path, ": listed in the manifest but missing");
    const uint64_t size = sys::file_size(path);
    LOOM_CHECK(size == bytes, path, ": ", size, " bytes, the manifest says ", bytes);
    const std::string got = hex64(xxh64_file(path));
    LOOM_CHECK(got == hex, path, ": XXH64 ", got, ", the manifest says ", hex, " (the file is corrupt)");
    names.insert(std::string(name));
  }
  for (const char* required : {"model.safetensors", "state.json", "config.ini"})
    LOOM_CHECK(names.count(required), manifest_path, ": does not list ", required);
  bool shards = false;
  for (const std::string& n : names) shards = shards || n.rfind("optimizer_zero1_", 0) == 0;
  LOOM_CHECK(names.count("optimizer.safetensors") || shards, manifest_path,
             ": lists neither optimizer.safetensors nor ZeRO-1 optimizer shards");
  return step;
}

int64_t validate_checkpoint_named(const std::string& dir) {
  const int64_t step = validate_checkpoint(dir);
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  name = sys::basename(name);
  const int64_t named = parse_step_name(name);
  LOOM_CHECK(named < 0 || named == step, dir, ": the folder is ", name, " but its manifest says step ", step);
  return step;
}

Checkpointer::Checkpointer(CheckpointOptions o) : o_(std::move(o)) {
  LOOM_CHECK(!o_.folder.empty(), "ckpt.save_ckpt_folder is empty");
  LOOM_CHECK(o_.keep >= 0, "ckpt.keep must be >= 0, got ", o_.keep);
}

std::string Checkpointer::save(int64_t step, const CheckpointContents& c) {
  begin(step);
  return commit(step, c, {});
}

std::string Checkpointer::begin(int64_t step) {
  const std::string tmp = o_.folder + "/" + checkpoint_dir_name(step) + ".tmp";
  remove_checkpoint_dir(tmp);  // left by a killed save
  sys::make_dirs(tmp);
  return tmp;
}

std::string Checkpointer::commit(int64_t step, const CheckpointContents& c, const std::vector<CheckpointFile>& extra) {
  const std::string final_dir = o_.folder + "/" + checkpoint_dir_name(step);
  const std::string tmp = final_dir + ".tmp";
  LOOM_ASSERT(sys::is_directory(tmp), tmp, ": commit without begin");

  std::vector<FileEntry> files;
  auto m = safetensors::write(tmp + "/model.safetensors", c.model, {{"format", "pt"}, {"loom_step", std::to_string(step)}});
  files.push_back({"model.safetensors", m.bytes, m.xxh64});
  if (!c.optimizer.empty()) {
    auto opt = safetensors::write(tmp + "/optimizer.safetensors", c.optimizer, {{"loom_step", std::to_string(step)}});
    files.push_back({"optimizer.safetensors", opt.bytes, opt.xxh64});
  }
  files.insert(files.end(), extra.begin(), extra.end());
  write_text(tmp + "/state.json", c.state_json, files);
  write_text(tmp + "/config.ini", c.config_ini, files);
  if (!c.tokenizer_model.empty()) write_text(tmp + "/" + kCheckpointTokenizer, c.tokenizer_model, files);
  if (!c.lr_schedule_ini.empty()) write_text(tmp + "/" + kCheckpointSchedule, c.lr_schedule_ini, files);

  std::ostringstream man;
  man << "{\"format\": \"" << kCheckpointFormat << "\", \"version\": " << kCheckpointVersion << ", \"step\": " << step
      << ", \"files\": [";
  for (size_t i = 0; i < files.size(); ++i)
    man << (i ? ", " : "") << "{\"name\": \"" << files[i].name << "\", \"bytes\": " << files[i].bytes
        << ", \"xxh64\": \"" << hex64(files[i].xxh64) << "\"}";
  man << "]}\n";
  std::vector<FileEntry> ignored;
  write_text(tmp + "/" + kManifest, man.str(), ignored);
  sys::fsync_dir(tmp);

  remove_checkpoint_dir(final_dir);  // a rerun of the same step replaces it
  sys::rename_file(tmp, final_dir);
  sys::fsync_dir(o_.folder);
  sys::AtomicFile latest(o_.folder + "/latest");
  latest.write(checkpoint_dir_name(step) + "\n");
  latest.commit();
  prune(step);
  return final_dir;
}

std::vector<int64_t> Checkpointer::steps() const {
  std::set<int64_t> found;
  if (!sys::is_directory(o_.folder)) return {};
  for (const auto& f : sys::list_files(o_.folder)) {
    const std::string parent = sys::dirname(f);
    if (sys::dirname(parent) != o_.folder) continue;
    const int64_t s = parse_step_name(sys::basename(parent));
    if (s >= 0) found.insert(s);
  }
  return {found.begin(), found.end()};
}

Checkpointer::Choice Checkpointer::choose_resume(const std::function<void(const std::string&, int64_t)>& check) const {
  Choice out;
  std::vector<int64_t> all = steps();
  // `latest` is written last, after its folder is complete: the newest checkpoint this history
  // published. Folders above it belong to an earlier run that went further before a resume from
  // an older checkpoint; resuming them would jump to the other history.
  int64_t latest = -1;
  const std::string latest_path = o_.folder + "/latest";
  if (sys::exists(latest_path)) {
    std::string text = sys::read_file(latest_path);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    latest = parse_step_name(text);
    if (latest < 0 || !std::binary_search(all.begin(), all.end(), latest)) {
      log::warn(latest_path, ": names '", text, "', which is not a step_N folder here; walking back from the newest");
      latest = -1;
    }
  }
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string dir = o_.folder + "/" + checkpoint_dir_name(*it);
    if (latest >= 0 && *it > latest) {
      log::info("not resuming ", dir, ": newer than `latest` (", checkpoint_dir_name(latest), "), left by an earlier run");
      continue;
    }
    try {
      const int64_t step = validate_checkpoint_named(dir);
      if (check) check(dir, step);
      out.dir = dir;
      return out;
    } catch (const Error& e) {
      log::warn("skipping damaged checkpoint: ", e.what());
      out.rejected.push_back(checkpoint_dir_name(*it) + ": " + e.what());
    }
  }
  return out;
}

void Checkpointer::prune(int64_t newest) {
  if (o_.keep == 0) return;
  std::vector<int64_t> all = steps();
  int64_t kept = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (*it > newest) continue;  // from a longer earlier run: not ours to judge
    if (kept++ < o_.keep) continue;
    remove_checkpoint_dir(o_.folder + "/" + checkpoint_dir_name(*it));
  }
}

}  // namespace loom
