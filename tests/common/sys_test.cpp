#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "loom/error.h"
#include "loom/sys.h"
#include "test_util.h"

using namespace loom;

TEST_CASE("AtomicFile is invisible until commit and leaves nothing when abandoned") {
  test::TempDir dir("sys");
  const std::string path = dir / "out.bin";
  std::string temp;
  {
    sys::AtomicFile f(path);
    temp = f.temp_path();
    f.write("hello");
    CHECK_FALSE(sys::exists(path));
    CHECK(sys::exists(temp));
  }
  CHECK_FALSE(sys::exists(path));
  CHECK_FALSE(sys::exists(temp));

  sys::AtomicFile g(path);
  std::string big(3 << 20, 'x');  // larger than the write buffer
  g.write("ab");
  g.write(big);
  g.commit();
  CHECK(test::read_all(path) == "ab" + big);
  CHECK(g.bytes_written() == big.size() + 2);
}

TEST_CASE("system-call errors name the call, the path and errno's text") {
  try {
    sys::File::open_read("/nonexistent/loom-file");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "open /nonexistent/loom-file: No such file or directory");
  }
}

TEST_CASE("MappedFile maps a file bytes and an empty file maps to nothing") {
  test::TempDir dir("mmap");
  test::write_all(dir / "a", "abcdef");
  test::write_all(dir / "empty", "");
  sys::MappedFile m(dir / "a");
  REQUIRE(m.size() == 6);
  CHECK(std::string(reinterpret_cast<const char*>(m.data()), 6) == "abcdef");
  sys::MappedFile e(dir / "empty");
  CHECK(e.size() == 0);
  CHECK(e.data() == nullptr);
}

TEST_CASE("list_files walks folders recursively in sorted order") {
  test::TempDir dir("walk");
  sys::make_dirs(dir / "b/c");
  test::write_all(dir / "b/c/z", "");
  test::write_all(dir / "b/a", "");
  test::write_all(dir / "a", "");
  auto files = sys::list_files(dir.path());
  REQUIRE(files == std::vector<std::string>{dir / "a", dir / "b/a", dir / "b/c/z"});
}

TEST_CASE("LOOM_CHECK throws Error with the message, LOOM_ASSERT throws InternalError") {
  CHECK_THROWS_AS([] { LOOM_CHECK(1 == 2, "value ", 3, " bad"); }(), Error);
  CHECK_THROWS_WITH([] { LOOM_CHECK(1 == 2, "value ", 3, " bad"); }(), "value 3 bad");  // no [file:line]
  CHECK_THROWS_AS([] { LOOM_ASSERT(false, "x"); }(), InternalError);
}

TEST_CASE("AtomicFile removes temporaries of dead processes of this host and keeps the others") {
  test::TempDir dir("stale");
  const std::string path = dir / "out.bin";
  // A pid that surely does not run any more: a child that has exited and been reaped.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string host = sys::hostname();
  const std::string stale = str(path, ".tmp.", host, ".", dead);
  const std::string live = str(path, ".tmp.", host, ".", ::getppid());
  const std::string other_host = str(path, ".tmp.other-host.", dead);
  const std::string other_file = str(dir / "other.bin", ".tmp.", host, ".", dead);
  for (const auto& f : {stale, live, other_host, other_file}) test::write_all(f, "x");
  sys::AtomicFile f(path);
  CHECK_FALSE(sys::exists(stale));
  CHECK(sys::exists(live));
  CHECK(sys::exists(other_host));
  CHECK(sys::exists(other_file));
  f.write("y");
  f.commit();
  CHECK(test::read_all(path) == "y");
}

TEST_CASE("canonical_path, same_file and path_inside see through spellings, symlinks and hard links") {
  test::TempDir dir("sys_paths");
  const std::string base = sys::canonical_path(dir.path());
  test::write_all(dir / "a", "x");
  REQUIRE(::symlink((dir / "a").c_str(), (dir / "s").c_str()) == 0);
  REQUIRE(::link((dir / "a").c_str(), (dir / "h").c_str()) == 0);
  CHECK(sys::canonical_path(dir / "./new/../a") == base + "/a");
  CHECK(sys::canonical_path(dir / "s") == base + "/a");
  CHECK(sys::canonical_path(dir / "missing/x/./y/../z") == base + "/missing/x/z");
  CHECK(sys::same_file(dir / "a", dir / "h"));
  CHECK(sys::same_file(dir / "s", dir / "a"));
  CHECK(sys::same_file(dir / "new/../a", dir / "a"));
  CHECK(sys::same_file(dir / "n1/../n2", dir / "n2/"));
  CHECK_FALSE(sys::same_file(dir / "a", dir / "b"));
  CHECK(sys::path_inside(dir / "sub/x", dir / "sub/"));
  CHECK(sys::path_inside(dir / "a", dir.path()));
  CHECK_FALSE(sys::path_inside(dir / "subx", dir / "sub"));
  CHECK_THROWS_WITH(sys::check_outputs_spare_inputs({dir / "s"}, {dir / "o", dir / "h"}),
                    Catch::Contains("the output " + dir / "h" + " is the input " + dir / "s"));
  sys::check_outputs_spare_inputs({dir / "a"}, {dir / "o", dir / "a.meta"});
}

TEST_CASE("glob: the matches of a shell pattern, sorted, and an empty list for none") {
  test::TempDir dir("sys_glob");
  for (const char* name : {"b_2.jsonl", "a_10.jsonl", "a_9.jsonl", "c.txt"}) test::write_all(dir / name, "x");
  CHECK(sys::glob(dir / "*.jsonl") == std::vector<std::string>{dir / "a_10.jsonl", dir / "a_9.jsonl", dir / "b_2.jsonl"});
  CHECK(sys::glob(dir / "a_?.jsonl") == std::vector<std::string>{dir / "a_9.jsonl"});
  CHECK(sys::glob(dir / "[bc]*") == std::vector<std::string>{dir / "b_2.jsonl", dir / "c.txt"});
  CHECK(sys::glob(dir / "*.parquet").empty());
}

TEST_CASE("open_regular and MappedFile refuse a FIFO, a folder and a device at once, naming what it is") {
  test::TempDir dir("sys_regular");
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0644) == 0);  // no writer: a blocking open would wait forever
  REQUIRE(::mkdir((dir / "folder").c_str(), 0755) == 0);
  test::write_all(dir / "file", "abc");
  CHECK_THROWS_WITH(sys::File::open_regular(dir / "fifo"), dir / "fifo: a FIFO (named pipe), expected a regular file");
  CHECK_THROWS_WITH(sys::MappedFile(dir / "fifo"), dir / "fifo: a FIFO (named pipe), expected a regular file");
  CHECK_THROWS_WITH(sys::MappedFile(dir / "folder"), dir / "folder: a folder, expected a regular file");
  CHECK_THROWS_WITH(sys::MappedFile("/dev/null"), "/dev/null: a character device, expected a regular file");
  CHECK_THROWS_WITH(sys::MappedFile(dir / "missing"), "open " + dir / "missing: No such file or directory");
  // A regular file reads as before, its descriptor blocking again.
  sys::File f = sys::File::open_regular(dir / "file");
  CHECK((::fcntl(f.fd(), F_GETFL) & O_NONBLOCK) == 0);
  char buf[3];
  f.pread_exact(buf, 3, 0);
  CHECK(std::string(buf, 3) == "abc");
  CHECK(sys::MappedFile(dir / "file").size() == 3);
}

TEST_CASE("lexists sees a symlink loop that exists() does not, and an output that is a folder is refused") {
  test::TempDir dir("sys_lexists");
  REQUIRE(::symlink("loop", (dir / "loop").c_str()) == 0);
  CHECK_FALSE(sys::exists(dir / "loop"));
  CHECK(sys::lexists(dir / "loop"));
  CHECK_FALSE(sys::lexists(dir / "none"));
  REQUIRE(::mkdir((dir / "out.bin").c_str(), 0755) == 0);
  CHECK_THROWS_WITH(sys::check_outputs_spare_inputs({dir / "in.bin"}, {dir / "out.bin"}),
                    "the output " + dir / "out.bin is a folder: a file cannot replace it; give a file path that is not "
                                    "a folder");
}
