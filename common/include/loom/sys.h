// Every system call loom makes goes through here, once, so each failure names the path, the call
// and errno's text. RAII owners: File (a descriptor), MappedFile (a read-only mmap), AtomicFile (a
// temporary file that becomes its final name only on commit(), after fsync: a killed job never
// leaves a half-written output under the final name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::sys {

// Throws loom::Error("CALL PATH: strerror(errno)") with an optional hint.
[[noreturn]] void throw_errno(const char* call, const std::string& path, int err, const char* hint = nullptr);

bool exists(const std::string& path);
// Whether a directory entry of this name exists (lstat: a symlink counts, even a dangling or looping one).
bool lexists(const std::string& path);
bool is_directory(const std::string& path);
bool is_symlink(const std::string& path);  // lstat: the entry itself is a symbolic link
uint64_t file_size(const std::string& path);
void make_dirs(const std::string& path);                // mkdir -p
void remove_file(const std::string& path);              // ignores ENOENT
void remove_dir(const std::string& path);               // an empty folder (rmdir); ignores ENOENT
// A new folder parent/<prefix>XXXXXX (mkdtemp: a name no one else holds, made with mkdir's O_EXCL
// semantics, never through a link); returns its path.
std::string make_unique_dir(const std::string& parent, const std::string& prefix);
void rename_file(const std::string& from, const std::string& to);
void fsync_dir(const std::string& dir);
std::string dirname(const std::string& path);
std::string basename(const std::string& path);
// The names in one folder (not recursive; "." and ".." left out), sorted.
std::vector<std::string> list_dir(const std::string& dir);
// Regular files under each path (a file is itself; a folder is walked recursively), sorted.
std::vector<std::string> list_files(const std::string& path);
// The paths a shell pattern (glob(3): *, ?, [...]) matches, sorted; none: an empty vector.
std::vector<std::string> glob(const std::string& pattern);
std::string read_file(const std::string& path);          // whole file, for small files only
// The absolute path with the part that exists resolved by realpath (symlinks, "..") and the rest
// appended with "." and ".." folded: two spellings of one place compare equal, even before it exists.
std::string canonical_path(const std::string& path);
// Whether a and b are one file: the same device and inode when both exist (so hard links and
// symlinks count), else the same canonical_path.
bool same_file(const std::string& a, const std::string& b);
// Whether path is dir or lies under it, canonically (the path itself, and its folder with its own name).
bool path_inside(const std::string& path, const std::string& dir);
// A tool's guard before it writes: throws loom::Error naming both paths when an output (each file
// the run would write or replace) is the same file as an input, which writing would destroy: the
// same inode for an output that exists, the same canonical_path for one that does not yet. An
// output that is an existing folder is refused too (the final rename could not replace it).
void check_outputs_spare_inputs(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs);
std::string hostname();
// Whether a process with this pid runs on this host.
bool process_alive(long pid);
// An environment variable's value, "" when unset; set_env replaces it (for libraries that read it
// later in this process, before their first use).
std::string get_env(const std::string& name);
void set_env(const std::string& name, const std::string& value);
void unset_env(const std::string& name);

// An owned file descriptor.
class File {
 public:
  File() = default;
  static File open_read(const std::string& path);
  // open_read for data files: refuses anything but a regular file (a FIFO, a folder, a device),
  // naming the path and what it is, without blocking (a FIFO with no writer is never waited on).
  static File open_regular(const std::string& path);
  static File create(const std::string& path);   // O_CREAT|O_TRUNC|O_WRONLY
  ~File();
  File(File&& o) noexcept;
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size() const;
  // Reads up to n bytes; returns 0 at end of file.
  size_t read_some(void* buf, size_t n);
  void pread_exact(void* buf, size_t n, uint64_t offset) const;
  void write_all(const void* buf, size_t n);
  void pwrite_all(const void* buf, size_t n, uint64_t offset);
  // Appends n bytes of src from src_offset, in the kernel (copy_file_range; read and write where
  // the file systems do not support it). src must hold them all.
  void copy_from(const File& src, uint64_t src_offset, uint64_t n);
  void fsync();
  void close();

 private:
  int fd_ = -1;
  std::string path_;
};

// A read-only memory map of a whole regular file (File::open_regular; an empty file maps to
// data() == nullptr, size() == 0).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Tells the kernel the access pattern (sequential for verify, random for the trainer's sampler).
  void advise_sequential() const;
  void advise_random() const;
  // Drops pages of [offset, offset+len) that were read, so a streaming pass over a file larger than
  // RAM does not evict everything else.
  void advise_done(uint64_t offset, uint64_t len) const;

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
};

// Writes to "<path>.tmp.<host>.<pid>"; commit() fsyncs and renames it to path. Destroyed uncommitted,
// it removes the temporary file, so failures leave nothing behind. A process killed with SIGKILL
// cannot clean up: the next AtomicFile for the same path removes temporaries of that path left by
// processes of this host that no longer run (the host in the name keeps a shared filesystem safe).
class AtomicFile;
// Several AtomicFiles that become visible together: all are fsynced before any is renamed, and the
// one named last (by convention the .meta index) marks the set complete.
void commit_all(std::vector<AtomicFile*> files);

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* buf, size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  // write() without the copy into the buffer: what is buffered goes first, then buf itself (for
  // large pieces whose copy would cost more than the extra system call).
  void write_unbuffered(const void* buf, size_t n);
  // Appends n bytes of src from src_offset without passing them through this process (File::copy_from).
  void copy_from(const File& src, uint64_t src_offset, uint64_t n);
  // Writes over bytes written before (the buffer is flushed first): a header filled in last.
  void write_at(uint64_t offset, const void* buf, size_t n);
  uint64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  void commit();
  // Flushes, fsyncs and closes the temporary file without renaming it (commit() renames later), so
  // many outputs can wait for a last check without holding a descriptor each.
  void seal();
  // Removes the temporary file now (also done by the destructor).
  void abandon();

 private:
  friend void commit_all(std::vector<AtomicFile*> files);
  void flush();
  std::string path_;
  std::string temp_path_;
  File file_;
  std::vector<uint8_t> buf_;
  uint64_t written_ = 0;
  bool sealed_ = false;
  bool committed_ = false;
};

}  // namespace loom::sys
