/**
 *  @file   flash_emulation.cpp
 *  @brief  Runs the device attention kernel `attention_flash` (src/kernels/attention_flash.cuh) on the
 *          CPU, one thread per lane, and checks it against a plain attention in double precision.
 *
 *  The kernel's source is compiled as is; only its warp-level primitives are supplied here, from the
 *  PTX ISA's definitions: `mma.sync.m16n8k16` (the A, B and C fragment layouts of bf16/f16 with f32
 *  accumulation), `ldmatrix.x4` and `ldmatrix.x4.trans`, `cp.async` (held back until the thread's
 *  `cp.async.wait_group` lets it land, so a read before the wait sees stale bytes), shuffles and
 *  `__syncthreads` (barriers over the warp's 32 or the block's threads). Shared memory starts as NaN
 *  bytes. The launch geometry (heads per block, warps per head, staging buffers) mirrors
 *  `text_vram_attention` in src/models/text_vram_launch.c.
 *
 *  Checks, for heads of 32, 64 and 128, packed texts of 1 to 512 tokens, bf16 and f16: every row of
 *  every text within tolerance of the reference (P and the output are rounded to the storage type),
 *  and no byte of `context` outside the texts' rows written. test/gpu/flash_emulation.sh builds and
 *  runs it (CTest: attention_flash_emulated). Exit 0 on success, 1 on a mismatch.
 */
#define UFORM_FLASH_EMULATION 1

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#define __device__
#define __forceinline__ inline

struct dim3_t {
    unsigned x = 0, y = 0, z = 0;
};
static thread_local dim3_t threadIdx, blockIdx;
static dim3_t blockDim;

/** Storage types: two bytes each, like __nv_bfloat16 and __half. */
struct bf16_t {
    uint16_t bits;
};
struct f16_t {
    uint16_t bits;
};

static float bf16_float(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static uint16_t float_bf16(float f) { // round to nearest even, NaN kept
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float f16_float(uint16_t bits) {
    _Float16 h;
    std::memcpy(&h, &bits, 2);
    return (float)h;
}
static uint16_t float_f16(float f) {
    _Float16 h = (_Float16)f;
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    return bits;
}

/* ---- Warp and block collectives over threads ---- */

struct warp_t {
    std::barrier<> barrier{32};
    alignas(16) unsigned char slots[32][64];
};
static thread_local warp_t *this_warp;
static thread_local int this_lane;
static thread_local std::barrier<> *this_block;

/** Every lane hands in `in`; `combine(all, lane)` computes this lane's result from all 32 inputs. */
template <typename In, typename Combine> static auto collective(In const &in, Combine combine) {
    static_assert(sizeof(In) <= 64, "slot size");
    std::memcpy(this_warp->slots[this_lane], &in, sizeof in);
    this_warp->barrier.arrive_and_wait();
    In all[32];
    for (int l = 0; l < 32; ++l) std::memcpy(&all[l], this_warp->slots[l], sizeof(In));
    auto out = combine(all, this_lane);
    this_warp->barrier.arrive_and_wait();
    return out;
}

static float __shfl_xor_sync(unsigned, float value, int offset) {
    return collective(value, [offset](float const *all, int lane) { return all[lane ^ offset]; });
}
static void __syncthreads() { this_block->arrive_and_wait(); }

static thread_local unsigned char *block_shared;
#define UFORM_FLASH_SHARED(name) unsigned char *const name = block_shared

namespace uform_text {

template <typename T> struct flash_pair;

struct mma_in_t {
    unsigned a[4], b0, b1;
    float d[4];
};
struct four_t {
    float v[4];
};
struct regs_t {
    unsigned r[4];
};

/** D = A B + C over the warp's fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"). */
template <float (*widen)(uint16_t)> static void mma_emulated(float (&d)[4], unsigned const (&a)[4], unsigned b0, unsigned b1) {
    mma_in_t in;
    std::memcpy(in.a, a, sizeof in.a), in.b0 = b0, in.b1 = b1, std::memcpy(in.d, d, sizeof in.d);
    four_t out = collective(in, [](mma_in_t const *all, int lane) {
        float A[16][16], B[16][8], C[16][8];
        for (int l = 0; l < 32; ++l) {
            int const g = l >> 2, t = l & 3;
            for (int e = 0; e < 2; ++e) {
                int const shift = 16 * e;
                A[g][2 * t + e] = widen((uint16_t)(all[l].a[0] >> shift));
                A[g + 8][2 * t + e] = widen((uint16_t)(all[l].a[1] >> shift));
                A[g][2 * t + 8 + e] = widen((uint16_t)(all[l].a[2] >> shift));
                A[g + 8][2 * t + 8 + e] = widen((uint16_t)(all[l].a[3] >> shift));
                B[2 * t + e][g] = widen((uint16_t)(all[l].b0 >> shift));
                B[2 * t + 8 + e][g] = widen((uint16_t)(all[l].b1 >> shift));
                C[g][2 * t + e] = all[l].d[e];
                C[g + 8][2 * t + e] = all[l].d[2 + e];
            }
        }
        int const g = lane >> 2, t = lane & 3;
        four_t result;
        for (int e = 0; e < 4; ++e) {
            int const row = g + (e >> 1) * 8, col = 2 * t + (e & 1);
            float acc = C[row][col];
            for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
            result.v[e] = acc;
        }
        return result;
    });
    std::memcpy(d, out.v, sizeof out.v);
}

template <> struct flash_pair<bf16_t> {
    static unsigned pack(float lo, float hi) { return (unsigned)float_bf16(lo) | (unsigned)float_bf16(hi) << 16; }
    static void mma(float (&d)[4], unsigned const (&a)[4], unsigned b0, unsigned b1) { mma_emulated<bf16_float>(d, a, b0, b1); }
};
template <> struct flash_pair<f16_t> {
    static unsigned pack(float lo, float hi) { return (unsigned)float_f16(lo) | (unsigned)float_f16(hi) << 16; }
    static void mma(float (&d)[4], unsigned const (&a)[4], unsigned b0, unsigned b1) { mma_emulated<f16_float>(d, a, b0, b1); }
};

/** ldmatrix.x4: lanes 8 i .. 8 i + 7 address the rows of matrix i; lane l receives, of each matrix,
 *  row l / 4, columns 2 (l % 4) and + 1 (transposed: rows 2 (l % 4) and + 1 of column l / 4). */
static void ldmatrix_any(unsigned (&r)[4], void const *shared, bool transposed) {
    regs_t out = collective(shared, [transposed](void const *const *all, int lane) {
        regs_t result;
        for (int i = 0; i < 4; ++i) {
            uint16_t e[2];
            for (int k = 0; k < 2; ++k) {
                int const row = transposed ? 2 * (lane & 3) + k : lane >> 2;
                int const col = transposed ? lane >> 2 : 2 * (lane & 3) + k;
                std::memcpy(&e[k], (unsigned char const *)all[8 * i + row] + 2 * col, 2);
            }
            result.r[i] = (unsigned)e[0] | (unsigned)e[1] << 16;
        }
        return result;
    });
    std::memcpy(r, out.r, sizeof out.r);
}
static void ldmatrix_x4(unsigned (&r)[4], void const *shared) { ldmatrix_any(r, shared, false); }
static void ldmatrix_x4_trans(unsigned (&r)[4], void const *shared) { ldmatrix_any(r, shared, true); }

/** cp.async: copies wait in groups until `copy_wait` lets them land. */
struct pending_copy_t {
    void *shared;
    void const *global;
    int bytes;
};
static thread_local std::vector<std::vector<pending_copy_t>> committed;
static thread_local std::vector<pending_copy_t> open_group;
static void copy16_async(void *shared, void const *global, int bytes) { open_group.push_back({shared, global, bytes}); }
static void copy_commit() { committed.push_back(std::move(open_group)), open_group.clear(); }
template <int pending> static void copy_wait() {
    while ((int)committed.size() > pending) {
        for (pending_copy_t const &c : committed.front()) {
            std::memset(c.shared, 0, 16);
            std::memcpy(c.shared, c.global, (size_t)c.bytes);
        }
        committed.erase(committed.begin());
    }
}
/** ex2.approx.ftz.f32: 2^x with subnormal results flushed to zero. */
static float flash_exp2(float x) {
    float const y = std::exp2(x);
    return std::fpclassify(y) == FP_SUBNORMAL ? 0.f : y;
}

} // namespace uform_text

#include "../../src/kernels/attention_flash.cuh"

/* ---- The launch, as text_vram_attention makes it ---- */

template <typename T, int HEAD, int STEP>
static void launch(T *context, T const *qkv, int const *offsets, int texts, int heads, int longest, int most,
                   int resident_wanted) {
    int const strips = (longest + 15) / 16, chunks = (strips + most - 1) / most;
    int const chunk = (strips + chunks - 1) / chunks;
    int group = 1;
    while (chunk * group * 2 <= 4 && heads % (group * 2) == 0) group *= 2;
    int const tiles = (longest + 63) / 64;
    int const resident = resident_wanted && tiles > 1;
    int const buffers = resident ? tiles : tiles > 1 ? 2 : 1;
    size_t const shared = (size_t)buffers * group * 2 * 64 * (HEAD + 8) * sizeof(T);
    float const scale = (float)(1.0 / std::sqrt((double)HEAD));
    int const threads = chunk * group * 32;
    blockDim.x = (unsigned)threads;
    std::vector<unsigned char> memory(shared);
    for (unsigned pair = 0; pair < (unsigned)(texts * (heads / group)); ++pair)
        for (unsigned by = 0; by < (unsigned)chunks; ++by) {
            unsigned const bx = pair * (unsigned)chunks + by;
            std::memset(memory.data(), 0xff, memory.size()); // NaN in bf16 and f16
            std::barrier<> block(threads);
            std::vector<warp_t> warps((size_t)threads / 32);
            std::vector<std::thread> lanes;
            for (int x = 0; x < threads; ++x)
                lanes.emplace_back([&, x] {
                    threadIdx.x = (unsigned)x, blockIdx.x = bx, blockIdx.y = 0;
                    this_warp = &warps[(size_t)x / 32], this_lane = x & 31, this_block = &block;
                    block_shared = memory.data();
                    uform_text::attention_flash<T, HEAD, STEP>(context, qkv, offsets, heads, scale, group, chunks, resident);
                    uform_text::committed.clear(), uform_text::open_group.clear();
                    /* A thread that returns early leaves the block's barrier for good, as on the device. */
                    block.arrive_and_drop();
                });
            for (std::thread &lane : lanes) lane.join();
        }
}

template <typename T, int HEAD, int STEP>
static int check(char const *name, float (*widen)(uint16_t), uint16_t (*narrow)(float), std::vector<int> const &lengths,
                 int heads, double tolerance, uint64_t seed, int most = 8, int resident = 0) {
    int const texts = (int)lengths.size(), hidden = heads * HEAD;
    std::vector<int> offsets(1, 0);
    for (int length : lengths) offsets.push_back(offsets.back() + length);
    int const tokens = offsets.back(), rows = tokens + 3; /* 3 rows past the last text: never written */
    int longest = 0;
    for (int length : lengths) longest = length > longest ? length : longest;
    std::mt19937_64 random(seed);
    std::uniform_real_distribution<float> uniform(-2.f, 2.f);
    std::vector<T> qkv((size_t)rows * 3 * hidden), context((size_t)rows * hidden);
    for (T &x : qkv) x.bits = narrow(uniform(random));
    uint16_t const sentinel = 0x7bcd;
    for (T &x : context) x.bits = sentinel;
    launch<T, HEAD, STEP>(context.data(), qkv.data(), offsets.data(), texts, heads, longest, most, resident);

    double worst = 0;
    int failures = 0;
    for (int text = 0; text < texts; ++text) {
        int const first = offsets[text], length = lengths[(size_t)text];
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < length; ++i) {
                auto at = [&](int row, int part, int c) {
                    return (double)widen(qkv[(size_t)(first + row) * 3 * hidden + (size_t)part * hidden + h * HEAD + c].bits);
                };
                std::vector<double> p((size_t)length);
                double best = -INFINITY, sum = 0;
                for (int j = 0; j < length; ++j) {
                    double s = 0;
                    for (int c = 0; c < HEAD; ++c) s += at(i, 0, c) * at(j, 1, c);
                    p[(size_t)j] = s / std::sqrt((double)HEAD);
                    best = p[(size_t)j] > best ? p[(size_t)j] : best;
                }
                for (double &x : p) x = std::exp(x - best), sum += x;
                for (int c = 0; c < HEAD; ++c) {
                    double expected = 0;
                    for (int j = 0; j < length; ++j) expected += p[(size_t)j] * at(j, 2, c);
                    expected /= sum;
                    double const got = widen(context[(size_t)(first + i) * hidden + h * HEAD + c].bits);
                    double const error = std::fabs(got - expected);
                    if (!(error <= tolerance)) {
                        if (failures < 5)
                            std::printf("  %s: text %d head %d row %d column %d: %.6f, expected %.6f\n", name, text, h, i, c,
                                        got, expected);
                        ++failures;
                    }
                    worst = error > worst || error != error ? error : worst;
                }
            }
    }
    int untouched = 1;
    for (size_t i = (size_t)tokens * hidden; i < context.size(); ++i) untouched &= context[i].bits == sentinel;
    if (!untouched) std::printf("  %s: rows past the last text were written\n", name), ++failures;
    std::printf("%-44s %d texts (longest %d), worst error %.5f (tolerance %.3f): %s\n", name, texts, longest, worst, tolerance,
                failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}

int main() {
    int failed = 0;
    failed += check<bf16_t, 64, 64>("bf16, 64-wide heads, one tile", bf16_float, float_bf16, {64, 1, 7, 16, 33}, 2, 0.015, 1);
    failed += check<bf16_t, 64, 32>("bf16, 64-wide heads, one tile, 32-key steps", bf16_float, float_bf16, {64, 1, 7, 16, 33},
                                    2, 0.015, 1);
    failed += check<bf16_t, 32, 32>("bf16, 32-wide heads, 4 heads per block", bf16_float, float_bf16, {3, 12, 16}, 4, 0.015, 2);
    failed += check<bf16_t, 32, 32>("bf16, 32-wide heads, two tiles", bf16_float, float_bf16, {128, 100, 65, 40}, 2, 0.015, 3);
    failed += check<bf16_t, 32, 64>("bf16, 32-wide heads, two tiles, 64-key steps", bf16_float, float_bf16, {128, 100, 65}, 2,
                                    0.015, 3);
    failed += check<f16_t, 128, 64>("f16, 128-wide heads, 4 tiles, 7 warps", f16_float, float_f16, {200, 130, 64, 1}, 1, 0.002, 4);
    failed += check<bf16_t, 64, 64>("bf16, 64-wide heads, 197 tokens (ViT-B/16)", bf16_float, float_bf16, {197}, 1, 0.015, 5);
    failed += check<f16_t, 64, 32>("f16, 64-wide heads, 512 tokens, 32-key steps", f16_float, float_f16, {512}, 1, 0.002, 6);
    /* Resident tiles (UFORM_GPU_FLASH_RESIDENT) in the launcher's geometries: 197 tokens in blocks of 7
     * or 4 warps, texts of one and of several tiles in one launch, 32-wide heads several per block. */
    failed += check<bf16_t, 64, 64>("bf16, 64-wide heads, 197 tokens, resident", bf16_float, float_bf16, {197, 5, 130}, 1, 0.015,
                                    9, 8, 1);
    failed += check<bf16_t, 64, 32>("bf16, 64-wide, 32-key steps, resident, 4 warps", bf16_float, float_bf16, {197, 64, 65, 17},
                                    2, 0.015, 10, 4, 1);
    failed += check<f16_t, 32, 64>("f16, 32-wide heads, 128 tokens, resident", f16_float, float_f16, {128, 100, 1}, 2, 0.002, 12,
                                   8, 1);
    std::printf("%s\n", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
