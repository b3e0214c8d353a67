#include "loom/sys.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <utility>

#include "loom/error.h"

namespace loom::sys {

void throw_errno(const char* call, const std::string& path, int err, const char* hint) {
  std::string msg = str(call, " ", path, ": ", std::strerror(err));
  if (hint) msg += str(" (hint: ", hint, ")");
  throw Error(msg);
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool lexists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_symlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw_errno("stat", path, errno);
  return static_cast<uint64_t>(st.st_size);
}

void make_dirs(const std::string& path) {
  if (path.empty() || is_directory(path)) return;
  make_dirs(dirname(path));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) throw_errno("mkdir", path, errno);
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_errno("unlink", path, errno);
}

void remove_dir(const std::string& path) {
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) throw_errno("rmdir", path, errno);
}

std::string make_unique_dir(const std::string& parent, const std::string& prefix) {
  std::string path = (parent.empty() ? std::string(".") : parent) + "/" + prefix + "XXXXXX";
  if (::mkdtemp(path.data()) == nullptr) throw_errno("mkdtemp", path, errno);
  return path;
}

void rename_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_errno("rename", from + " -> " + to, errno);
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("open", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems (e.g. certain network mounts) refuse fsync on directories; that is not fatal.
  if (rc != 0 && err != EINVAL && err != EROFS) throw_errno("fsync", dir, err);
}

std::string dirname(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return "";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

std::string basename(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

std::vector<std::string> list_dir(const std::string& dir) {
  // closedir on every exit, a throwing push_back included.
  const std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) throw_errno("opendir", dir, errno);
  std::vector<std::string> names;
  while (const struct dirent* e = ::readdir(d.get())) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {
void walk(const std::string& dir, std::vector<std::string>& out) {
  for (const auto& name : list_dir(dir)) {
    std::string p = dir + "/" + name;
    if (is_directory(p)) walk(p, out);
    else out.push_back(p);
  }
}
}  // namespace


std::vector<std::string> list_files(const std::string& path) {
  std::vector<std::string> out;
  if (is_directory(path)) {
    std::string dir = path;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    walk(dir, out);
  } else {
    if (!exists(path)) throw_errno("stat", path, ENOENT);
    out.push_back(path);
  }
  return out;
}

std::vector<std::string> glob(const std::string& pattern) {
  glob_t g{};
  struct Free {
    glob_t& g;
    ~Free() { ::globfree(&g); }
  } free_it{g};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  if (rc == GLOB_NOMATCH) return {};
  LOOM_CHECK(rc == 0, pattern, ": glob failed (", rc == GLOB_NOSPACE ? "out of memory" : "a folder could not be read",
             ")");
  std::vector<std::string> out(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_file(const std::string& path) {
  File f = File::open_read(path);
  std::string s(f.size(), '\0');
  if (!s.empty()) f.pread_exact(s.data(), s.size(), 0);
  return s;
}

std::string canonical_path(const std::string& path) {
  std::string abs = path;
  if (abs.empty() || abs[0] != '/') {
    char* cwd = ::getcwd(nullptr, 0);
    if (!cwd) throw_errno("getcwd", path, errno);
    abs = std::string(cwd) + "/" + path;
    std::free(cwd);
  }
  // Walk up to the longest prefix realpath resolves; the names below it are folded lexically.
  std::vector<std::string> rest;
  std::string head = abs;
  std::string out;
  for (;;) {
    while (head.size() > 1 && head.back() == '/') head.pop_back();
    if (char* r = ::realpath(head.c_str(), nullptr)) {
      out = r;
      std::free(r);
      break;
    }
    rest.push_back(basename(head));
    head = dirname(head);
    if (head.empty()) head = "/";
  }
  for (auto it = rest.rbegin(); it != rest.rend(); ++it) {
    if (it->empty() || *it == ".") continue;
    if (*it == "..") {
      out = dirname(out);
      if (out.empty()) out = "/";
      continue;
    }
    out += (out == "/" ? "" : "/") + *it;
  }
  return out;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return canonical_path(a) == canonical_path(b);
}

bool path_inside(const std::string& path, const std::string& dir) {
  const std::string d = canonical_path(dir);
  const auto under = [&](const std::string& p) { return p == d || p.rfind(d == "/" ? d : d + "/", 0) == 0; };
  // The entry itself (a symlink in dir is removed with dir's files) and what it resolves to.
  const std::string parent = dirname(path);
  return under(canonical_path(parent.empty() ? "." : parent) + "/" + basename(path)) || under(canonical_path(path));
}

void check_outputs_spare_inputs(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
  std::map<std::pair<dev_t, ino_t>, const std::string*> by_inode;
  std::map<std::string, const std::string*> by_path;
  struct stat st;
  for (const std::string& in : inputs) {
    if (::stat(in.c_str(), &st) == 0) by_inode.emplace(std::make_pair(st.st_dev, st.st_ino), &in);
    by_path.emplace(canonical_path(in), &in);
  }
  for (const std::string& out : outputs) {
    const std::string* in = nullptr;
    if (::stat(out.c_str(), &st) == 0) {
      LOOM_CHECK(!S_ISDIR(st.st_mode), "the output ", out,
                 " is a folder: a file cannot replace it; give a file path that is not a folder");
      const auto it = by_inode.find({st.st_dev, st.st_ino});
      if (it != by_inode.end()) in = it->second;
    } else {
      // Not there yet, but folders the tool makes may lead to an input ("new/../a.bin").
      const auto it = by_path.find(canonical_path(out));
      if (it != by_path.end()) in = it->second;
    }
    LOOM_CHECK(in == nullptr, "the output ", out, " is the input ", *in,
               " (the same file): writing it would replace the input; give an output path outside the inputs");
  }
}

std::string hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

bool process_alive(long pid) {
  // EPERM means it exists but belongs to someone else.
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

std::string get_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v != nullptr ? v : "";
}

void set_env(const std::string& name, const std::string& value) {
  LOOM_CHECK(::setenv(name.c_str(), value.c_str(), 1) == 0, "setenv ", name, ": ", std::strerror(errno));
}

void unset_env(const std::string& name) {
  LOOM_CHECK(::unsetenv(name.c_str()) == 0, "unsetenv ", name, ": ", std::strerror(errno));
}

// ---- File ----

File File::open_read(const std::string& path) {
  File f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) throw_errno("open", path, errno);
  return f;
}

namespace {
const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}
}  // namespace

File File::open_regular(const std::string& path) {
  File f;
  f.path_ = path;
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer, forever.
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f.fd_ < 0) throw_errno("open", path, errno);
  struct stat st;
  if (::fstat(f.fd_, &st) != 0) throw_errno("fstat", path, errno);
  LOOM_CHECK(S_ISREG(st.st_mode), path, ": ", file_type_name(st.st_mode), ", expected a regular file");
  const int flags = ::fcntl(f.fd_, F_GETFL);
  if (flags < 0 || ::fcntl(f.fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) throw_errno("fcntl", path, errno);
  return f;
}

File File::create(const std::string& path) {
  File f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd_ < 0) throw_errno("open", path, errno, "is the output folder writable?");
  return f;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File::File(File&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

uint64_t File::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) throw_errno("fstat", path_, errno);
  return static_cast<uint64_t>(st.st_size);
}

size_t File::read_some(void* buf, size_t n) {
  for (;;) {
    ssize_t r = ::read(fd_, buf, n);
    if (r >= 0) return static_cast<size_t>(r);
    if (errno != EINTR) throw_errno("read", path_, errno);
  }
}

void File::pread_exact(void* buf, size_t n, uint64_t offset) const {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("pread", path_, errno);
    if (r == 0) throw Error(str("read ", path_, ": unexpected end of file at byte ", offset));
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

void File::write_all(const void* buf, size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::write(fd_, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("write", path_, errno, errno == ENOSPC ? "the disk is full" : nullptr);
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void File::pwrite_all(const void* buf, size_t n, uint64_t offset) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("pwrite", path_, errno, errno == ENOSPC ? "the disk is full" : nullptr);
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

void File::copy_from(const File& src, uint64_t src_offset, uint64_t n) {
  auto in = static_cast<loff_t>(src_offset);
  bool kernel = true;
  std::vector<uint8_t> buf;
  while (n > 0) {
    const size_t step = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    if (kernel) {
      const ssize_t r = ::copy_file_range(src.fd_, &in, fd_, nullptr, step, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP || errno == EBADF)) {
        kernel = false;  // nothing was copied by the failed call
        continue;
      }
      if (r < 0) throw_errno("copy_file_range", path_, errno, errno == ENOSPC ? "the disk is full" : nullptr);
      LOOM_CHECK(r > 0, src.path_, ": ends before byte ", in, " (copying into ", path_, ")");
      n -= static_cast<uint64_t>(r);
      continue;
    }
    const size_t got = std::min<size_t>(step, size_t{1} << 20);
    buf.resize(got);
    src.pread_exact(buf.data(), got, static_cast<uint64_t>(in));
    write_all(buf.data(), got);
    in += static_cast<loff_t>(got);
    n -= got;
  }
}

void File::fsync() {
  if (::fsync(fd_) != 0) throw_errno("fsync", path_, errno);
}

void File::close() {
  if (fd_ >= 0) {
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw_errno("close", path_, errno);
  }
}

// ---- MappedFile ----

MappedFile::MappedFile(const std::string& path) : path_(path) {
  File f = File::open_regular(path);
  size_ = f.size();
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, f.fd(), 0);
  if (p == MAP_FAILED) throw_errno("mmap", path, errno);
  data_ = static_cast<uint8_t*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_), path_(std::move(o.path_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

// madvise is only advice: failures are ignored on purpose.
void MappedFile::advise_sequential() const {
  if (data_) ::madvise(data_, size_, MADV_SEQUENTIAL);
}

void MappedFile::advise_random() const {
  if (data_) ::madvise(data_, size_, MADV_RANDOM);
}

void MappedFile::advise_done(uint64_t offset, uint64_t len) const {
  if (!data_) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t begin = offset / page * page;
  uint64_t end = std::min(size_, offset + len) / page * page;
  if (end > begin) ::madvise(data_ + begin, end - begin, MADV_DONTNEED);
}

// ---- AtomicFile ----

namespace {
constexpr size_t kWriteBuffer = 1 << 20;
}

namespace {
// Removes "<path>.tmp.<host>.<pid>" files whose process is gone (a killed earlier run).
void remove_stale_temporaries(const std::string& path) {
  const std::string dir = dirname(path);
  const std::string prefix = basename(path) + ".tmp." + hostname() + ".";
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (!d) return;  // the create below reports a missing folder properly
  std::vector<std::string> stale;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (end && *end == '\0' && !process_alive(pid)) stale.push_back(name);
  }
  ::closedir(d);
  for (const auto& name : stale) remove_file(dir.empty() ? name : dir + "/" + name);
}
}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  remove_stale_temporaries(path_);
  temp_path_ = str(path_, ".tmp.", hostname(), ".", ::getpid());
  file_ = File::create(temp_path_);
  buf_.reserve(kWriteBuffer);
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    file_ = File();
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t n) {
  LOOM_ASSERT(!committed_ && !sealed_, "write after commit to ", path_);
  written_ += n;
  if (buf_.size() + n > kWriteBuffer) flush();
  if (n >= kWriteBuffer) {
    file_.write_all(data, n);
    return;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  buf_.insert(buf_.end(), p, p + n);
}

void AtomicFile::write_unbuffered(const void* data, size_t n) {
  LOOM_ASSERT(!committed_ && !sealed_, "write after commit to ", path_);
  written_ += n;
  flush();
  file_.write_all(data, n);
}

void AtomicFile::copy_from(const File& src, uint64_t src_offset, uint64_t n) {
  LOOM_ASSERT(!committed_ && !sealed_, "write after commit to ", path_);
  written_ += n;
  flush();
  file_.copy_from(src, src_offset, n);
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t n) {
  LOOM_ASSERT(!committed_ && !sealed_, "write after commit to ", path_);
  LOOM_ASSERT(offset + n <= written_, "write_at past what was written to ", path_);
  flush();
  file_.pwrite_all(data, n, offset);
}

void AtomicFile::flush() {
  if (!buf_.empty()) file_.write_all(buf_.data(), buf_.size());
  buf_.clear();
}

void AtomicFile::commit() {
  commit_all({this});
}

void AtomicFile::seal() {
  if (sealed_) return;
  flush();
  file_.fsync();
  file_.close();
  sealed_ = true;
  std::vector<uint8_t>().swap(buf_);  // a run may hold thousands of sealed files
}

void AtomicFile::abandon() {
  if (committed_) return;
  file_ = File();
  remove_file(temp_path_);
}

void commit_all(std::vector<AtomicFile*> files) {
  for (AtomicFile* f : files) f->seal();
  for (AtomicFile* f : files) {
    rename_file(f->temp_path_, f->path_);
    f->committed_ = true;
  }
  if (!files.empty()) fsync_dir(dirname(files.front()->path_));
}

}  // namespace loom::sys
