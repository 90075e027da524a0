// Jump consistent hash, exactly as published in Lamping & Veach, "A Fast, Minimal Memory, Consistent
// Hash Algorithm" (arXiv:1406.2294, 2014), Figure 1. Prints `key buckets bucket` lines: the golden
// vectors that crates/shardring/src/algo/jump.rs checks.
//
// Regenerate: g++ -O2 -o /tmp/jump testdata/jump/jump.cc && /tmp/jump > testdata/jump/golden.txt
#include <cstdint>
#include <cstdio>

int32_t JumpConsistentHash(uint64_t key, int32_t num_buckets) {
  int64_t b = -1, j = 0;
  while (j < num_buckets) {
    b = j;
    key = key * 2862933555777941757ULL + 1;
    j = (b + 1) * (double(1LL << 31) / double((key >> 33) + 1));
  }
  return b;
}

int main() {
  // Keys: small integers, powers of two, all-ones, and a fixed 64-bit LCG stream (deterministic).
  uint64_t keys[64];
  int k = 0;
  for (uint64_t i = 0; i < 8; i++) keys[k++] = i;
  keys[k++] = 1ULL << 32;
  keys[k++] = 1ULL << 63;
  keys[k++] = ~0ULL;
  keys[k++] = 0xdeadbeefULL;
  uint64_t x = 0x853c49e6748fea9bULL;
  while (k < 64) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    keys[k++] = x;
  }
  const int32_t buckets[] = {1, 2, 3, 5, 10, 16, 100, 1000, 65536, 2147483647};
  std::printf("# key buckets JumpConsistentHash(key, buckets), from testdata/jump/jump.cc\n");
  for (int i = 0; i < 64; i++) {
    for (int32_t n : buckets) {
      std::printf("%llu %d %d\n", (unsigned long long)keys[i], n, JumpConsistentHash(keys[i], n));
    }
  }
  return 0;
}
