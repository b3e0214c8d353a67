#include <catch2/catch.hpp>

#include "loom/error.h"
#include "loom/sys.h"
#include "tensorboard.h"
#include "test_util.h"

using namespace loom;

TEST_CASE("crc32c matches the Castagnoli check value") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
}

// An independent reader: TFRecord framing and masked CRC32C recomputed in Python (bitwise CRC, not
// a table), the Event/Summary protobuf decoded from the wire format by hand.
static const char* kPyReader = R"(
import struct, sys
def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ 0x82f63b78 if c & 1 else c >> 1
    return c ^ 0xffffffff
def masked(b):
    c = crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1; v |= (x & 0x7f) << s; s += 7
        if not x & 0x80: return v, i
def fields(b):
    i = 0
    while i < len(b):
        k, i = varint(b, i); f, w = k >> 3, k & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: v = b[i:i+8]; i += 8
        elif w == 5: v = b[i:i+4]; i += 4
        elif w == 2: n, i = varint(b, i); v = b[i:i+n]; i += n
        else: raise SystemExit('bad wire type %d' % w)
        yield f, w, v
raw = open(sys.argv[1], 'rb').read(); i = 0
while i < len(raw):
    n, = struct.unpack('<Q', raw[i:i+8])
    assert struct.unpack('<I', raw[i+8:i+12])[0] == masked(raw[i:i+8]), 'length crc'
    data = raw[i+12:i+12+n]
    assert struct.unpack('<I', raw[i+12+n:i+16+n])[0] == masked(data), 'data crc'
    i += 16 + n
    step = 0; out = []
    for f, w, v in fields(data):
        if f == 1: assert w == 1 and struct.unpack('<d', v)[0] > 1.6e9
        if f == 2: step = v
        if f == 3: out.append('version=' + v.decode())
        if f == 5:
            for f2, w2, val in fields(v):
                tag = None; x = None
                for f3, w3, y in fields(val):
                    if f3 == 1: tag = y.decode()
                    if f3 == 2: x = struct.unpack('<f', y)[0]
                out.append('%s=%r' % (tag, x))
    print(step, ' '.join(out))
)";

TEST_CASE("tensorboard events read back by an independent Python reader, and truncated on resume") {
  test::TempDir dir("tb");
  test::write_all(dir / "read.py", kPyReader);
  {
    TensorBoardWriter w(dir / "tb", -1);
    w.add_scalars(1, {{"loss", 2.5f}, {"lr", 0.125f}});
    w.add_scalars(2, {{"loss", 2.25f}, {"val/a_loss", 3.0f}});
    w.add_scalars(3, {{"loss", 2.0f}});
  }
  auto r = test::run(test::python() + " " + dir / "read.py " + dir / "tb/events.out.tfevents.loom");
  REQUIRE(r.exit_code == 0);
  CHECK(r.output == "0 version=brain.Event:2\n1 loss=2.5 lr=0.125\n2 loss=2.25 val/a_loss=3.0\n3 loss=2.0\n");
  // A resumed run from step 2 drops step 3 and continues.
  {
    TensorBoardWriter w(dir / "tb", 2);
    w.add_scalars(3, {{"loss", 1.5f}});
  }
  r = test::run(test::python() + " " + dir / "read.py " + dir / "tb/events.out.tfevents.loom");
  REQUIRE(r.exit_code == 0);
  CHECK(r.output == "0 version=brain.Event:2\n1 loss=2.5 lr=0.125\n2 loss=2.25 val/a_loss=3.0\n3 loss=1.5\n");
  CHECK(read_tfrecords(dir / "tb/events.out.tfevents.loom").size() == 4);
}

TEST_CASE("tfrecord reader names the damaged record") {
  test::TempDir dir("tb_bad");
  const std::string good = tfrecord("abc") + tfrecord("defgh");
  std::string bad = good;
  bad[19 + 12 + 1] ^= 1;  // inside record 1's data (record 0 is 19 bytes)
  test::write_all(dir / "e", bad);
  CHECK_THROWS_WITH(read_tfrecords(dir / "e"), Catch::Contains("record 1 at byte 19: data CRC mismatch"));
  CHECK(read_tfrecords(dir / "e", /*stop_at_damage=*/true).size() == 1);
  test::write_all(dir / "e", good.substr(0, good.size() - 2));
  CHECK_THROWS_WITH(read_tfrecords(dir / "e"), Catch::Contains("record 1 at byte 19: length 5 runs past the end"));
  bad = good;
  bad[3] ^= 1;
  test::write_all(dir / "e", bad);
  CHECK_THROWS_WITH(read_tfrecords(dir / "e"), Catch::Contains("record 0 at byte 0: length CRC mismatch"));
}
