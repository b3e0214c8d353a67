#include "loom/tokenize/byte_source.h"

#include <zlib.h>
#include <zstd.h>

#include <vector>

#include "loom/error.h"
#include "loom/strings.h"
#include "loom/sys.h"

namespace loom::tokenize {

namespace {

constexpr size_t kInBufBytes = 1 << 20;

class PlainSource : public ByteSource {
 public:
  explicit PlainSource(const std::string& path) : file_(sys::File::open_read(path)) {}
  size_t read(void* buf, size_t n) override {
    size_t got = file_.read_some(buf, n);
    consumed_ += got;
    return got;
  }
  uint64_t file_bytes_read() const override { return consumed_; }
  const std::string& path() const override { return file_.path(); }

 private:
  sys::File file_;
  uint64_t consumed_ = 0;
};

// Compressed input: refills in_ from the file and hands it to the decompressor.
class CompressedSource : public ByteSource {
 public:
  explicit CompressedSource(const std::string& path) : file_(sys::File::open_read(path)), in_(kInBufBytes) {}
  uint64_t file_bytes_read() const override { return consumed_; }
  const std::string& path() const override { return file_.path(); }

 protected:
  // Makes sure unread input is available; returns false at the end of the file.
  bool fill() {
    if (in_pos_ < in_len_) return true;
    if (eof_) return false;
    in_len_ = file_.read_some(in_.data(), in_.size());
    in_pos_ = 0;
    consumed_ += in_len_;
    if (in_len_ == 0) eof_ = true;
    return in_len_ > 0;
  }
  sys::File file_;
  std::vector<uint8_t> in_;
  size_t in_pos_ = 0, in_len_ = 0;
  bool eof_ = false;
  uint64_t consumed_ = 0;
};

// gzip, including files of several concatenated members (what `cat a.gz b.gz` and pigz make).
class GzipSource : public CompressedSource {
 public:
  explicit GzipSource(const std::string& path) : CompressedSource(path) {
    // 15 + 32: zlib detects the gzip header itself.
    LOOM_ASSERT(inflateInit2(&z_, 15 + 32) == Z_OK, "inflateInit2 failed (out of memory?)");
  }
  ~GzipSource() override { inflateEnd(&z_); }

  size_t read(void* buf, size_t n) override {
    if (n == 0) return 0;
    for (;;) {
      if (member_done_) {
        // Another member may follow; anything else after a member is an error.
        if (!fill()) return 0;
        LOOM_CHECK(inflateReset(&z_) == Z_OK, path(), ": gzip: cannot reset the decoder");
        member_done_ = false;
      }
      // At the end of the file the decoder may still hold output: call it once more with no input.
      const bool have = fill();
      z_.next_in = have ? in_.data() + in_pos_ : nullptr;
      z_.avail_in = have ? static_cast<uInt>(in_len_ - in_pos_) : 0;
      z_.next_out = static_cast<Bytef*>(buf);
      z_.avail_out = static_cast<uInt>(n);
      int rc = inflate(&z_, Z_NO_FLUSH);
      if (have) in_pos_ = in_len_ - z_.avail_in;
      const size_t produced = n - z_.avail_out;
      if (rc == Z_STREAM_END) {
        member_done_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        LOOM_FAIL(path(), ": corrupt gzip stream near compressed byte ", consumed_ - (in_len_ - in_pos_), ": ",
                  z_.msg ? z_.msg : "inflate failed");
      }
      if (produced == 0 && !have && !member_done_) {
        LOOM_FAIL(path(), ": truncated gzip stream: the file ends at byte ", consumed_,
                  " inside a compressed member (was it cut off?)");
      }
      if (produced > 0) return produced;
    }
  }

 private:
  z_stream z_{};
  bool member_done_ = false;
};

class ZstdSource : public CompressedSource {
 public:
  explicit ZstdSource(const std::string& path) : CompressedSource(path), dctx_(ZSTD_createDCtx()) {
    LOOM_ASSERT(dctx_ != nullptr, "ZSTD_createDCtx failed (out of memory?)");
  }
  ~ZstdSource() override { ZSTD_freeDCtx(dctx_); }

  size_t read(void* buf, size_t n) override {
    if (n == 0) return 0;
    for (;;) {
      const bool have = fill();
      if (!have && frame_done_) return 0;
      // At the end of the file the decoder may still hold output: call it once more with no input.
      ZSTD_inBuffer in{in_.data(), have ? in_len_ : 0, have ? in_pos_ : 0};
      ZSTD_outBuffer out{buf, n, 0};
      const size_t rc = ZSTD_decompressStream(dctx_, &out, &in);
      if (have) in_pos_ = in.pos;
      LOOM_CHECK(!ZSTD_isError(rc), path(), ": corrupt zstd stream near compressed byte ",
                 consumed_ - (in_len_ - in_pos_), ": ", ZSTD_getErrorName(rc));
      // rc == 0: a frame ended exactly here (another may follow).
      frame_done_ = rc == 0;
      LOOM_CHECK(out.pos > 0 || have || frame_done_, path(), ": truncated zstd stream: the file ends at byte ",
                 consumed_, " inside a frame (was it cut off?)");
      if (out.pos > 0) return out.pos;
    }
  }

 private:
  ZSTD_DCtx* dctx_;
  bool frame_done_ = true;
};

}  // namespace

Compression compression_for(const std::string& path) {
  if (ends_with(path, ".gz")) return Compression::kGzip;
  if (ends_with(path, ".zst") || ends_with(path, ".zstd")) return Compression::kZstd;
  return Compression::kNone;
}

std::string strip_compression_ext(const std::string& path) {
  for (const char* ext : {".gz", ".zst", ".zstd"}) {
    if (ends_with(path, ext)) return path.substr(0, path.size() - std::string(ext).size());
  }
  return path;
}

std::unique_ptr<ByteSource> open_byte_source(const std::string& path) {
  switch (compression_for(path)) {
    case Compression::kGzip: return std::make_unique<GzipSource>(path);
    case Compression::kZstd: return std::make_unique<ZstdSource>(path);
    case Compression::kNone: break;
  }
  return std::make_unique<PlainSource>(path);
}

}  // namespace loom::tokenize
