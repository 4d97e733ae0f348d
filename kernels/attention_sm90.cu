// attention_sm90.cu: the causal attention forward and backward on Hopper's own
// instructions (sm_90a), for bf16/fp16 at head sizes 64 and 128 (see attention.h;
// attention.cu dispatches here when the device is compute capability 9.0 and the binary
// holds sm_90a code). The backward is described where it starts, below.
//
// Forward: a block computes 128 query rows of one head at a time (one such item after
// another, see fa3_fwd) in three warpgroups, producer and consumers (warp
// specialization, as FlashAttention-3 describes it):
// - the producer (warpgroup 0; one thread issues) loads the query tile and streams key and
//   value tiles of 128 rows through a ring of shared-memory stages with TMA (bulk tensor
//   copies: cp.async.bulk.tensor), each stage's arrival counted by an mbarrier ("full")
//   and its release by the consumers by another ("empty");
// - each consumer warpgroup owns 64 query rows: S = Q K^T by wgmma with both operands in
//   shared memory, the online softmax in registers (running max and sum, exp2 with the
//   scale folded in, masks only on tiles that cross the diagonal or the end), then
//   O += P V by wgmma with P taken straight from the score accumulators (an accumulator's
//   per-warp layout is the A-operand layout of the next product) and V transposed from
//   shared memory.
// The two consumers take turns to issue their products (ping-pong), and the producer
// gives registers back (setmaxnreg) so that the consumers hold their score and output
// accumulators (64 + 64 floats at head size 128) without spilling.
//
// Shared-memory tiles are in the 128-byte swizzled layout that TMA writes and wgmma reads:
// rows of 64 elements (128 bytes), 16-byte chunk c of row r stored at chunk c ^ (r % 8),
// 8-row atoms of 1024 bytes (1024-aligned); a head size of 128 is two such column halves,
// one after the other. The query rows past the sequence are TMA's zero fill (the tensor
// map is three-dimensional: columns, positions, batch), and so are the key and value rows.
//
// The sm_80 build and other devices keep attention.cu's mma.sync kernels; so does this
// device with mt_attention_sm90 = 0 (tests compare both with the CPU reference).
#include "attention.h"

#include "common.cuh"
#include "norm.h"
#include "rope.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <type_traits>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "wgmma.cuh"
#endif

extern "C" int mt_attention_sm90 = 1;
extern "C" int mt_attention_deterministic = 0;
extern "C" int mt_attention_bwd_group = 0;
extern "C" int mt_attention_bwd_alt = -1;

// the switches for comparisons; the library sets them from the environment
// (mt_attention_sm90_set_options), and without that call they keep these defaults
static struct mt_attention_sm90_options opts = MT_ATTENTION_SM90_OPTIONS_DEFAULT;

extern "C" void mt_attention_sm90_set_options(const struct mt_attention_sm90_options *o)
{
	opts = *o;
}

namespace {

constexpr int BQ = 128, BK = 128, THREADS = 384;
constexpr float LOG2E_F = 1.4426950408889634f;

struct geo90 {
	int T, np, per, row;
	float sl2, scale; // scale * log2(e), 1 / sqrt(hd)
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// a wgmma shared-memory matrix descriptor, 128-byte swizzle: start address, leading and
// stride byte offsets (16-byte units)
__device__ __forceinline__ uint64_t sdesc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
	return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, unsigned bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity)
{
	unsigned done;
	do
		asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
			     : "=r"(done)
			     : "r"(bar), "r"(parity)
			     : "memory");
	while (!done);
}
// a block's mbarriers at bars: [0] its one-off tiles (one arrival and their bytes); full[s]
// at bars + 8 + 8s (the producer's arrival and the stage's bytes) and empty[s] after them
// (lane 0 of each consumer warp), s < ns; made by thread 0, seen by all after the sync
__device__ __forceinline__ void ring_init(uint32_t bars, int ns)
{
	if (threadIdx.x == 0) {
		mbar_init(bars, 1);
		for (int s = 0; s < ns; s++) {
			mbar_init(bars + 8 + 8 * s, 1);
			mbar_init(bars + 8 + 8 * ns + 8 * s, 8);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();
}
// a box of the three-dimensional tensor map (column, position, batch) into shared memory,
// counted on bar
__device__ __forceinline__ void tma_load3(uint32_t dst, const CUtensorMap *tm, uint32_t bar, int c, int t, int b)
{
	asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
		     "l"((uint64_t)tm), "r"(bar), "r"(c), "r"(t), "r"(b)
		     : "memory");
}
// named barriers: a warpgroup (128 threads), or n threads
__device__ __forceinline__ void wg_bar(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void nbar_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void nbar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
#endif

// stages of the key/value ring: three (at head size 128 that is 224 KB of shared memory with
// the query tile; two there made the Llama-style forward 25% slower on an H100: the
// producer could load only one tile ahead)
constexpr int FWD_STAGES = 3;
template <int HD> constexpr size_t fwd_smem() { return (size_t)BQ * HD * 2 + 2 * FWD_STAGES * (size_t)BK * HD * 2 + 64 + 1024; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// a score of one tile (keys from j0) as the softmax sees it: the keys after the row or past
// the end count as -inf where MASK
template <bool MASK> __device__ __forceinline__ float fwd_val(const float *s, int n, int e, int r0, int j0, int tc, int T_)
{
	if constexpr (MASK) {
		int i = r0 + 8 * (e >> 1), j = j0 + 8 * n + tc + (e & 1);
		return j > i || j >= T_ ? -INFINITY : s[4 * n + e];
	} else {
		return s[4 * n + e];
	}
}
// The softmax's options (fwd_opt):
// - OPT_LAZY: a running maximum moves only when a tile's exceeds it by more than LAZY_LOG2,
//   so P stays within [0, 2^LAZY_LOG2] and the sums and O well inside fp32; otherwise corr
//   is 1, and a warp whose rows all keep theirs skips O's rescale (64 multiplications a
//   thread a tile at head size 128). Head size 128 only: at 64 the branch cost more than the
//   32 multiplications it skips (GPT-2's forward 5.3 -> 5.5 ms a step; the Llama-style
//   model's 5.4 -> 5.3; an H200).
// - OPT_RSUM: the running sums l add the fp32 exponentials, not P's rounded values: one
//   addition an exponential instead of a conversion and an addition (GPT-2's forward 5.3 ->
//   5.0 ms a step; with OPT_LAZY the Llama-style model's 5.4 -> 4.9).
constexpr int OPT_LAZY = 1, OPT_RSUM = 2;
constexpr float LAZY_LOG2 = 8.0f;
template <int HD> __host__ __device__ constexpr int fwd_opt() { return OPT_RSUM | (HD == 128 ? OPT_LAZY : 0); }

// the online softmax's new running maxima m of one tile's scores s (scaled, log2 units),
// corr = 2^(old - new) of each row half, and the running sums l scaled by corr
template <bool MASK, int OPT>
__device__ __forceinline__ void fwd_max(const float *s, float *m, float *l, float *corr, float sl2, int r0, int j0, int tc, int T_)
{
#pragma unroll
	for (int h = 0; h < 2; h++) {
		float mx = -INFINITY, mn;
#pragma unroll
		for (int n = 0; n < BK / 8; n++)
			mx = fmaxf(mx, fmaxf(fwd_val<MASK>(s, n, 2 * h, r0, j0, tc, T_), fwd_val<MASK>(s, n, 2 * h + 1, r0, j0, tc, T_)));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		mn = fmaxf(m[h], mx * sl2);
		if ((OPT & OPT_LAZY) && mn <= m[h] + LAZY_LOG2) {
			corr[h] = 1.0f;
			continue;
		}
		corr[h] = ex2(m[h] - mn);
		m[h] = mn;
		l[h] *= corr[h];
	}
}
// the online softmax of one tile: fwd_max, then P packed as the A operand of P.V (16 keys
// a step: registers (row, keys 0-7), (row + 8, 0-7), (row, 8-15), (row + 8, 8-15) of the
// step's two 8-key accumulator blocks) and the running sums l (OPT_RSUM: of the
// exponentials; else of what P.V multiplies).
// s is only read: P.V may still be in flight, and writing registers that a product
// issued with it uses would make ptxas serialize the products.
template <typename T, bool MASK, int OPT>
__device__ __forceinline__ void fwd_softmax(const float *s, float *m, float *l, float *corr, unsigned (*pa)[4], float sl2,
					    int r0, int j0, int tc, int T_)
{
	fwd_max<MASK, OPT>(s, m, l, corr, sl2, r0, j0, tc, T_);
#pragma unroll
	for (int kk = 0; kk < BK / 16; kk++)
#pragma unroll
		for (int r = 0; r < 4; r++) {
			int n = 2 * kk + r / 2, e = 2 * (r % 2);
			float x0 = ex2(fwd_val<MASK>(s, n, e, r0, j0, tc, T_) * sl2 - m[r % 2]);
			float x1 = ex2(fwd_val<MASK>(s, n, e + 1, r0, j0, tc, T_) * sl2 - m[r % 2]);
			pa[kk][r] = pack2<T>(x0, x1);
			if constexpr (OPT & OPT_RSUM)
				l[r % 2] += x0 + x1;
			else
				l[r % 2] += sum2<T>(pa[kk][r]);
		}
}
// the same with P left in s as fp32 exponentials (in place: P.V of the previous tile
// may still be in flight, but it reads P's registers, not these), for fwd_pack to pack
// once that product is done, so that one P buffer serves (FlashAttention-3's order)
template <bool MASK, int OPT>
__device__ __forceinline__ void fwd_softmax_exp(float *s, float *m, float *l, float *corr, float sl2, int r0, int j0, int tc,
						int T_)
{
	fwd_max<MASK, OPT>(s, m, l, corr, sl2, r0, j0, tc, T_);
#pragma unroll
	for (int n = 0; n < BK / 8; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			s[4 * n + e] = ex2(fwd_val<MASK>(s, n, e, r0, j0, tc, T_) * sl2 - m[e >> 1]);
			if constexpr (OPT & OPT_RSUM)
				l[e >> 1] += s[4 * n + e];
		}
}
// P packed as the A operand of P.V (16 keys a step: registers (row, keys 0-7), (row + 8,
// 0-7), (row, 8-15), (row + 8, 8-15) of the step's two 8-key accumulator blocks), and
// without OPT_RSUM the running sums l of what P.V multiplies (the rounded values)
template <typename T, int OPT> __device__ __forceinline__ void fwd_pack(const float *s, float *l, unsigned (*pa)[4])
{
#pragma unroll
	for (int kk = 0; kk < BK / 16; kk++)
#pragma unroll
		for (int r = 0; r < 4; r++) {
			int n = 2 * kk + r / 2, e = 2 * (r % 2);
			pa[kk][r] = pack2<T>(s[4 * n + e], s[4 * n + e + 1]);
			if constexpr (!(OPT & OPT_RSUM))
				l[r % 2] += sum2<T>(pa[kk][r]);
		}
}

// keeps a value computed before this point (the compiler would otherwise sink it)
__device__ __forceinline__ void pin(uint64_t &x) { asm volatile("" : "+l"(x)); }
__device__ __forceinline__ void pin(unsigned &x) { asm volatile("" : "+r"(x)); }

// One tile's products, issued and not waited for: S = Q K^T (with PV: O += P V of the
// previous tile behind it in a second commit group). Q and K are K-major: 16 columns (32
// bytes) a step within a 128-byte row, the head size's 64-column halves one after the
// other. V is MN-major (head-size columns contiguous): 16 keys are two 8-row atoms
// (1024 bytes apart), the 64-column halves BK * 128 bytes apart. Every descriptor and P
// register is made before the first product: a register defined between the products in
// flight makes ptxas serialize them.
template <typename T, int HD, bool PV>
__device__ __forceinline__ void fwd_issue(float *s, uint32_t sq, uint32_t sk, float *o, unsigned (*pa)[4], uint32_t sv)
{
	uint64_t da[HD / 16], db[HD / 16], dv[BK / 16];
#pragma unroll
	for (int k = 0; k < HD / 16; k++) {
		da[k] = sdesc(sq + (k / 4) * BQ * 128 + (k % 4) * 32, 16, 1024);
		db[k] = sdesc(sk + (k / 4) * BK * 128 + (k % 4) * 32, 16, 1024);
		pin(da[k]), pin(db[k]);
	}
	if constexpr (PV)
#pragma unroll
		for (int kk = 0; kk < BK / 16; kk++) {
			dv[kk] = sdesc(sv + kk * 16 * 128, BK * 128, 1024);
			pin(dv[kk]);
#pragma unroll
			for (int r = 0; r < 4; r++)
				pin(pa[kk][r]);
		}
	wgmma_fence();
	wgmma<T, BK>::template ss<0>(s, da[0], db[0]);
#pragma unroll
	for (int k = 1; k < HD / 16; k++)
		wgmma<T, BK>::template ss<1>(s, da[k], db[k]);
	wgmma_commit();
	if constexpr (PV) {
#pragma unroll
		for (int kk = 0; kk < BK / 16; kk++)
			wgmma<T, HD>::template rs_t<1>(o, pa[kk], dv[kk]);
		wgmma_commit();
	}
}

// O += P V of the last tile
template <typename T, int HD> __device__ __forceinline__ void fwd_pv(float *o, unsigned (*pa)[4], uint32_t sv)
{
	uint64_t dv[BK / 16];
#pragma unroll
	for (int kk = 0; kk < BK / 16; kk++) {
		dv[kk] = sdesc(sv + kk * 16 * 128, BK * 128, 1024);
		pin(dv[kk]);
	}
	wgmma_fence();
#pragma unroll
	for (int kk = 0; kk < BK / 16; kk++)
		wgmma<T, HD>::template rs_t<1>(o, pa[kk], dv[kk]);
	wgmma_commit();
}
#endif

// The forward is persistent (PERSIST): a block an SM (at most), each taking the work
// items (128 query rows of one head) blockIdx.x, + gridDim.x, ..., those with the most key
// tiles first. The producer loads the next item's query tile as soon as the consumers
// have issued their last product of the current one (qempty) and streams key/value tiles
// through the same ring from item to item, so the consumers' epilogue (the output rows
// and lse) overlaps the next item's loads, and no block pays a launch, its barriers'
// set-up or the first tiles' latency per item. Without it (MT_ATTN_PERSIST=0, for
// comparisons) a block takes one item.
template <typename T, int HD, bool PP, bool PERSIST>
__global__ void __launch_bounds__(THREADS, 1) fa3_fwd(T *y, float *lse, const __grid_constant__ CUtensorMap tm, geo90 g, int B,
						      int gh)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	constexpr int NH = HD / 64, QBYTES = BQ * HD * 2, KBYTES = BK * HD * 2, ND = HD / 2, NS = FWD_STAGES, OPT = fwd_opt<HD>();
	extern __shared__ unsigned char smraw[];
	uint32_t base = (smem_u32(smraw) + 1023u) & ~1023u;
	uint32_t sq = base, sk0 = base + QBYTES, sv0 = sk0 + NS * KBYTES, bars = sv0 + NS * KBYTES;
	// barriers: the query tile; full[NS]; empty[NS]; the query tile read (qempty)
	uint32_t qbar = bars, full0 = bars + 8, empty0 = bars + 8 + 8 * NS, qempty = bars + 8 + 16 * NS;
	int wg = threadIdx.x / 128, nqt = (g.T + BQ - 1) / BQ, nhb = g.np * B, nitems = nqt * nhb;
	// item i: the heads-and-batches in groups of gh, and in a group the query tiles the
	// longest first, so that the blocks running at once share their keys and values in L2
	// (a persistent block with gh = the grid takes one head's tiles one after another); gh
	// 0: the longest tiles of every head first
	auto item_of = [&](int i, int &q0, int &nt, int &hh, int &b) {
		int qt, hb;
		if (gh > 0) {
			int h0 = i / (gh * nqt) * gh, gs = min(gh, nhb - h0), j = i - h0 * nqt;
			qt = nqt - 1 - j / gs, hb = h0 + j % gs;
		} else {
			qt = nqt - 1 - i / nhb, hb = i % nhb;
		}
		hh = hb % g.np, b = hb / g.np, q0 = qt * BQ;
		nt = min((q0 + BQ + BK - 1) / BK, (g.T + BK - 1) / BK);
	};

	if (threadIdx.x == 0)
		mbar_init(qempty, 8);
	ring_init(bars, NS);

	if (wg == 0) {
		asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
		if (threadIdx.x == 0) {
			int gt = 0, it = 0;
			for (int i = blockIdx.x; i < (PERSIST ? nitems : (int)blockIdx.x + 1); i += gridDim.x, it++) {
				int q0, nt, hh, b;
				item_of(i, q0, nt, hh, b);
				int grp = hh / g.per, qcol = (grp * (g.per + 2) + hh % g.per) * HD;
				int kcol = (grp * (g.per + 2) + g.per) * HD, vcol = kcol + HD;
				if (it > 0)
					mbar_wait(qempty, (it - 1) & 1);
				mbar_expect(qbar, QBYTES);
				for (int h = 0; h < NH; h++)
					tma_load3(sq + h * BQ * 128, &tm, qbar, qcol + 64 * h, q0, b);
				for (int t = 0; t < nt; t++, gt++) {
					int s = gt % NS;
					uint32_t fb = full0 + 8 * s, sk = sk0 + s * KBYTES, sv = sv0 + s * KBYTES;
					if (gt >= NS)
						mbar_wait(empty0 + 8 * s, ((gt / NS) - 1) & 1);
					mbar_expect(fb, 2 * KBYTES);
					for (int h = 0; h < NH; h++) {
						tma_load3(sk + h * BK * 128, &tm, fb, kcol + 64 * h, t * BK, b);
						tma_load3(sv + h * BK * 128, &tm, fb, vcol + 64 * h, t * BK, b);
					}
				}
			}
		}
		return;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");

	// Each consumer warpgroup: S of tile t is issued with P.V of tile t - 1 behind it, so
	// the tensor cores work on P.V while the warps wait for S and then run the softmax of
	// tile t; the rescale of O waits for P.V (FlashAttention-3's intra-warpgroup overlap).
	// At head size 128 the packing of P waits for P.V too, so that one P buffer serves:
	// that leaves registers enough for the persistent loop. At 64 (registers to spare)
	// P is packed into a second buffer while P.V runs: 6% faster there (GPT-2 on an H200).
	constexpr bool TWO_P = HD == 64;
	int c = wg - 1, lane = threadIdx.x % 32, w = (threadIdx.x % 128) / 32, tc = 2 * (lane % 4);
	float o[ND], s[BK / 2], m[2], l[2], corr[2];
	unsigned pa[BK / 16][4], pn[BK / 16][4];
	// PP: the two warpgroups take turns to issue their products (named barriers 3 + c:
	// consumer c's turn), so that one's softmax runs while the other's products do
	// (FlashAttention-3's ping-pong); the second starts by giving the first its turn and
	// leaves out its last hand-over, which nobody would wait for
	auto turn_wait = [&]() {
		if (PP)
			nbar_sync(3 + c, 256);
	};
	auto turn_pass = [&](bool last) {
		if (PP && !(last && c == 1))
			nbar_arrive(4 - c, 256);
	};

	if (PP && c == 1)
		nbar_arrive(3, 256);
	// item i, this block's item it, the ring's tiles gt before it
	auto run = [&](int i, int it, int gt, bool final) {
		int q0, nt, hh, b;
		item_of(i, q0, nt, hh, b);
		int rlo = q0 + 64 * c, r0 = rlo + 16 * w + lane / 4;

#pragma unroll
		for (int k = 0; k < ND; k++)
			o[k] = 0.0f;
		m[0] = m[1] = -INFINITY;
		l[0] = l[1] = 0.0f;
		mbar_wait(qbar, it & 1);
		mbar_wait(full0 + 8 * (gt % NS), (gt / NS) & 1);
		turn_wait();
		fwd_issue<T, HD, false>(s, sq + c * 64 * 128, sk0 + (gt % NS) * KBYTES, o, pa, 0);
		turn_pass(false);
		wgmma_wait<0>();
		wgmma_hold<BK / 2>(s);
		if constexpr (TWO_P) {
			fwd_softmax<T, true, OPT>(s, m, l, corr, pa, g.sl2, r0, 0, tc, g.T);
		} else {
			fwd_softmax_exp<true, OPT>(s, m, l, corr, g.sl2, r0, 0, tc, g.T);
			fwd_pack<T, OPT>(s, l, pa);
		}
		// tile t: P of tile t - 1 in pp. With two P buffers (head size 64), this tile's P
		// goes into pq while P.V runs, and the loop runs two tiles an iteration with the
		// roles swapped (copying pq to pp would let ptxas fold the two into the same
		// registers, written while P.V reads them, and serialize the products); with one
		// (pq is pp) it is packed once P.V is done
		auto tile = [&](int t, unsigned (&pp)[BK / 16][4], unsigned (&pq)[BK / 16][4]) {
			int st = (gt + t) % NS, sp = (gt + t - 1) % NS, j0 = t * BK;

			mbar_wait(full0 + 8 * st, ((gt + t) / NS) & 1);
			turn_wait();
			fwd_issue<T, HD, true>(s, sq + c * 64 * 128, sk0 + st * KBYTES, o, pp, sv0 + sp * KBYTES);
			turn_pass(false);
			wgmma_wait<1>(); // S done, P.V may still run
			wgmma_hold<BK / 2>(s);
			bool mask = j0 + BK - 1 > rlo || j0 + BK > g.T; // keys after some row of this warpgroup, or past the end
			if constexpr (TWO_P) {
				if (mask)
					fwd_softmax<T, true, OPT>(s, m, l, corr, pq, g.sl2, r0, j0, tc, g.T);
				else
					fwd_softmax<T, false, OPT>(s, m, l, corr, pq, g.sl2, r0, j0, tc, g.T);
			} else {
				if (mask)
					fwd_softmax_exp<true, OPT>(s, m, l, corr, g.sl2, r0, j0, tc, g.T);
				else
					fwd_softmax_exp<false, OPT>(s, m, l, corr, g.sl2, r0, j0, tc, g.T);
			}
			wgmma_wait<0>();
			wgmma_hold<ND>(o);
			if (lane == 0)
				mbar_arrive(empty0 + 8 * sp);
			if (!(OPT & OPT_LAZY) || __any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f))
#pragma unroll
				for (int n = 0; n < HD / 8; n++) {
					o[4 * n] *= corr[0];
					o[4 * n + 1] *= corr[0];
					o[4 * n + 2] *= corr[1];
					o[4 * n + 3] *= corr[1];
				}
			if constexpr (!TWO_P)
				fwd_pack<T, OPT>(s, l, pq);
		};
		uint32_t sl = (gt + nt - 1) % NS; // the last tile's stage
		if constexpr (TWO_P) {
			int t = 1;
			for (; t + 1 < nt; t += 2) {
				tile(t, pa, pn);
				tile(t + 1, pn, pa);
			}
			if (t < nt) {
				tile(t, pa, pn);
				turn_wait();
				fwd_pv<T, HD>(o, pn, sv0 + sl * KBYTES);
			} else {
				turn_wait();
				fwd_pv<T, HD>(o, pa, sv0 + sl * KBYTES);
			}
		} else {
			for (int t = 1; t < nt; t++)
				tile(t, pa, pa);
			turn_wait();
			fwd_pv<T, HD>(o, pa, sv0 + sl * KBYTES);
		}
		turn_pass(final);
		wgmma_wait<0>();
		wgmma_hold<ND>(o);
		if (PERSIST && lane == 0) { // the last stage and the query tile are free for the next item
			mbar_arrive(empty0 + 8 * sl);
			mbar_arrive(qempty);
		}
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int r = r0 + 8 * h;
			float inv;
			l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
			l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
			inv = 1.0f / l[h];
			if (r >= g.T)
				continue;
			T *yr = y + ((int64_t)b * g.T + r) * g.np * HD + hh * HD;
#pragma unroll
			for (int n = 0; n < HD / 8; n++)
				*(unsigned *)(yr + 8 * n + tc) = pack2<T>(o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv);
			if (lane % 4 == 0)
				lse[((int64_t)b * g.np + hh) * g.T + r] = (m[h] + log2f(l[h])) * (1.0f / LOG2E_F);
		}
		return nt;
	};
	if constexpr (PERSIST) {
		int gt = 0, it = 0;
		for (int i = blockIdx.x; i < nitems; i += gridDim.x, it++)
			gt += run(i, it, gt, i + (int)gridDim.x >= nitems);
	} else {
		run(blockIdx.x, 0, 0, true);
	}
#endif
}

// ---- backward ----
//
// The key/value kernel: a block of 128 keys (64 a consumer warpgroup) streams the query
// and output-gradient tiles of every head of its group. D = rowsum(dO * O) comes first
// (bwd_dsum). Per tile:
//   S^T = K Q^T, dP^T = V dO^T (both operands K-major in shared memory),
//   P^T = exp(S^T - lse), dS^T = P^T (dP^T - D) scale, dV += P^T dO, dK += dS^T Q
//   (P^T and dS^T from registers, dO and Q MN-major). The two consumer warpgroups take
//   turns to issue S^T and dP^T, as the forward's do (the backward of GPT-2 B=64 3%
//   faster, the Llama-style model's 1.3%: means of four runs each on H200s), at head size
//   64; at 128 they make dQ in turns instead (below).
// The query gradients, two ways (MODE):
// - 1 and 2 (the default; five products): the same pass also computes the tile's
//   dQ = dS K. dS goes to shared memory (stmatrix, transposed: query rows of keys), both
//   warpgroups' halves make one 128-key product (at head size 64 each warpgroup makes it
//   for half of the tile's queries; at 128 one warpgroup makes all of it, the two in turn,
//   so that the other goes on without waiting), and the fp32 result is added to a dQ
//   accumulator in global memory by one bulk reduction (cp.reduce.async.bulk) a tile,
//   which a warp of the producer warpgroup issues from a double buffer. MODE 1 lets the
//   key blocks add in any order (a run's bits may differ in dQ's last places); MODE 2
//   (--deterministic) adds them in a fixed order, the last key block first: a counter a
//   query tile says whose turn it is. dq_out turns the accumulator into dQ.
// - 0 (MT_ATTN_BWD7=1, for comparisons): a second kernel, a block of 128 queries
//   streaming key and value tiles (64 keys a tile), S = Q K^T, dP = dO V^T, P, dS as
//   above, dQ += dS K (K MN-major): seven products, no atomics.
// lse and D of the tile's queries go through shared memory in the key/value kernel (a
// column each), in registers in the query kernel (a row each).
// queries a tile (key/value kernel), keys a tile (query kernel): 128 at head size 64 (each
// product twice as wide for the same waits), 64 at 128 (registers)
template <int HD> __host__ __device__ constexpr int bm() { return HD <= 64 ? 128 : 64; }
// whether the five-product kernel leaves the softmax scale out of dS and applies it to dK
// (its epilogue) and dQ (dq_out) once: one multiplication fewer a score (GPT-2's backward
// 15.5 -> 15.3 ms a step on an H200). bf16 only: unscaled, fp16's dS would have 8 to 11
// times less headroom under the loss scale.
template <typename T, int MODE> __host__ __device__ constexpr bool bwd_fold()
{
	return MODE != 0 && std::is_same<T, __nv_bfloat16>::value;
}

// the key/value kernel's shared memory: K, V; the query and output-gradient ring; lse and
// D columns; with dQ (MODE > 0) the tile's dS ([2 key halves][BM][128 B]) and two buffers of
// its fp32 dQ
template <int HD, int MODE> __host__ __device__ constexpr size_t dkv_smem()
{
	constexpr int BM = bm<HD>();
	return 2 * (size_t)BK * HD * 2 + 2 * 2 * (size_t)BM * HD * 2 + 2 * 2 * BM * 2 * 4 +
	       (MODE ? (size_t)BM * BK * 2 + 2 * (size_t)BM * HD * 4 : 0) + 64 + 1024;
}
template <typename T, int HD> __host__ __device__ constexpr size_t dq_smem()
{
	constexpr int BM = bm<HD>();
	return 2 * (size_t)BQ * HD * 2 + 2 * 2 * (size_t)BM * HD * 2 + 64 + 1024;
}

// D[b][h][t] = the dot product of a (row, head)'s output gradient and output: HD / 8
// threads an item, 16 bytes of each a thread, summed across them by shuffles
template <typename T, int HD>
__global__ void bwd_dsum(float *D, const T *dy, const T *y, int rows, int np, int T_)
{
	constexpr int TPR = HD / 8;
	int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, item = k / TPR;
	int part = (int)(k % TPR);
	float sum = 0.0f;
	if (item < (int64_t)rows * np) {
		int64_t off = item * HD + part * 8; // (row i, head h) at (i * np + h) * HD
		float a[8], o[8];
		vec16<T>::load(a, dy + off);
		vec16<T>::load(o, y + off);
#pragma unroll
		for (int e = 0; e < 8; e++)
			sum += a[e] * o[e];
	}
#pragma unroll
	for (int o = TPR / 2; o; o /= 2)
		sum += __shfl_xor_sync(0xffffffffu, sum, o);
	if (item < (int64_t)rows * np && part == 0) {
		int i = (int)(item / np), h = (int)(item % np);
		D[((int64_t)(i / T_) * np + h) * T_ + i % T_] = sum;
	}
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// C (64 x N) = A B^T over HD: A (64 rows) and B (N rows) K-major, [HD / 64 halves][rows][128 B],
// the halves arows * 128 and brows * 128 bytes apart; issued and committed
template <typename T, int N, int HD>
__device__ __forceinline__ void ss_kmajor(float *c, uint32_t sa, int arows, uint32_t sb, int brows)
{
	uint64_t da[HD / 16], db[HD / 16];
#pragma unroll
	for (int k = 0; k < HD / 16; k++) {
		da[k] = sdesc(sa + (k / 4) * arows * 128 + (k % 4) * 32, 16, 1024);
		db[k] = sdesc(sb + (k / 4) * brows * 128 + (k % 4) * 32, 16, 1024);
		pin(da[k]), pin(db[k]);
	}
	wgmma_fence();
	wgmma<T, N>::template ss<0>(c, da[0], db[0]);
#pragma unroll
	for (int k = 1; k < HD / 16; k++)
		wgmma<T, N>::template ss<1>(c, da[k], db[k]);
	wgmma_commit();
}
// C (64 x HD) += A B: A (64 x K) from registers, B (K rows x HD) MN-major in shared memory
// ([halves][K rows][128 B]); issued and committed
template <typename T, int HD, int K>
__device__ __forceinline__ void rs_mn(float *c, unsigned (*a)[4], uint32_t sb)
{
	uint64_t db[K / 16];
#pragma unroll
	for (int kk = 0; kk < K / 16; kk++) {
		db[kk] = sdesc(sb + kk * 16 * 128, K * 128, 1024);
		pin(db[kk]);
#pragma unroll
		for (int r = 0; r < 4; r++)
			pin(a[kk][r]);
	}
	wgmma_fence();
#pragma unroll
	for (int kk = 0; kk < K / 16; kk++)
		wgmma<T, HD>::template rs_t<1>(c, a[kk], db[kk]);
	wgmma_commit();
}
// this thread's shared-memory writes made visible to the async proxy (wgmma, bulk copies)
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// four 8x8 blocks of 16-bit values (a[i]: block i in the accumulator layout) stored
// transposed, rows at the addresses lanes 8i..8i+7 give
__device__ __forceinline__ void stsm4t(uint32_t addr, const unsigned *a)
{
	asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a[0]), "r"(a[1]),
		     "r"(a[2]), "r"(a[3])
		     : "memory");
}
// C (64 x 64) = A B over 128 keys: A (64 rows of keys) K-major in shared memory ([2 key
// halves][arows][128 B]), B (128 keys x 64 columns) MN-major ([128 keys][128 B]); committed
template <typename T> __device__ __forceinline__ void ss_dq(float *c, uint32_t sa, int arows, uint32_t sb)
{
	uint64_t da[BK / 16], db[BK / 16];
#pragma unroll
	for (int k = 0; k < BK / 16; k++) {
		da[k] = sdesc(sa + (k / 4) * arows * 128 + (k % 4) * 32, 16, 1024);
		db[k] = sdesc(sb + k * 16 * 128, BK * 128, 1024);
		pin(da[k]), pin(db[k]);
	}
	wgmma_fence();
	wgmma<T, 64>::template ss_t<0>(c, da[0], db[0]);
#pragma unroll
	for (int k = 1; k < BK / 16; k++)
		wgmma<T, 64>::template ss_t<1>(c, da[k], db[k]);
	wgmma_commit();
}
// dst[0, bytes) += src[0, bytes) (fp32, global from shared memory), one bulk reduction
__device__ __forceinline__ void bulk_add(float *dst, uint32_t src, unsigned bytes)
{
	asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
		     "cp.async.bulk.commit_group;\n" ::"l"(dst),
		     "r"(src), "r"(bytes)
		     : "memory");
}
// dst[0, bytes) = src[0, bytes): the first key block's tile, so that the accumulator needs no
// zeroing beforehand
__device__ __forceinline__ void bulk_store(float *dst, uint32_t src, unsigned bytes)
{
	asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
		     "cp.async.bulk.commit_group;\n" ::"l"(dst),
		     "r"(src), "r"(bytes)
		     : "memory");
}
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ int ld_acquire(const int *p)
{
	int v;
	asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
	return v;
}
#endif

template <typename T, int HD, int MODE, bool ALT>
__global__ void __launch_bounds__(THREADS, 1)
	fa3_bwd_dkv(T *dqkv, const float *lse, const float *D, const __grid_constant__ CUtensorMap tq,
		    const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tdo, geo90 g, float *dqacc,
		    int *turn, float *pk, const float *rope, int gh, int pp)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	constexpr int BM = bm<HD>(), KVB = BK * HD * 2, QB = BM * HD * 2, ND = HD / 2, DQB = BM * HD * 4;
	constexpr bool FOLD = bwd_fold<T, MODE>();
	// named barriers of the five-product kernel: 3 both consumer warpgroups (dS written /
	// read), 4 + s dQ buffer s written (the consumers arrive, the writer warp waits), 6 + s
	// buffer s read by the bulk reduction (the writer arrives, the consumers wait), 8 the
	// bias gradients' sums (both consumer warpgroups); in every mode, 9 + c consumer c's turn.
	// ALT (head size 128): tile t's whole dQ is warpgroup t % 2's, so dQ buffer s is written
	// by consumer s alone (4 + s, 6 + s: 128 + 32 threads); 3 says the other warpgroup's half
	// of dS is written, 11 that the last tile's dQ products (the other warpgroup's) have read dS
	constexpr int NB_DS = 3, NB_FULL = 4, NB_FREE = 6, NB_BIAS = 8, NB_PP = 9, NB_DSFREE = 11;
	constexpr int NB_N = ALT ? 128 + 32 : 256 + 32;
	static_assert(!ALT || (HD == 128 && MODE != 0), "dQ by one warpgroup a tile: head size 128, five products");
	extern __shared__ unsigned char smraw[];
	uint32_t base = (smem_u32(smraw) + 1023u) & ~1023u;
	uint32_t sk = base, sv = sk + KVB, sq0 = sv + KVB, so0 = sq0 + 2 * QB, sds = so0 + 2 * QB + 2 * 2 * BM * 2 * 4;
	uint32_t sdq = sds + (MODE ? BM * BK * 2 : 0), bars = sdq + (MODE ? 2 * DQB : 0);
	float *cols = (float *)(smraw + (so0 + 2 * QB - smem_u32(smraw))); // [consumer][2 buffers][lse2, D][BM]
	uint32_t kvbar = bars, full0 = bars + 8, empty0 = bars + 8 + 16;
	// in a fixed order the last key block adds first: its blocks start first. Otherwise, with
	// gh > 0, the blocks start in groups of gh (group, batch) pairs, every key block of a group
	// before the next group's and the longest first within it (key block 0 has the most
	// query tiles): the last blocks to start are short ones, where one key block after
	// another of each pair left the longest blocks to the end
	int wg = threadIdx.x / 128, kb = MODE == 2 ? gridDim.x - 1 - blockIdx.x : blockIdx.x, grp = blockIdx.y, b = blockIdx.z;
	if (MODE != 2 && gh > 0) {
		int L = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), np2 = gridDim.y * gridDim.z;
		int c0 = L / (gh * gridDim.x) * gh, cs = min(gh, np2 - c0), o = L - c0 * gridDim.x, pair = c0 + o % cs;
		kb = o / cs, grp = pair % gridDim.y, b = pair / gridDim.y;
	}
	int k0 = kb * BK, qt0 = k0 / BM, nqt = (g.T + BM - 1) / BM, per = g.per, ntile = per * (nqt - qt0);
	int kcol = (grp * (per + 2) + per) * HD, vcol = kcol + HD;

	ring_init(bars, 2);
	if (wg == 0) {
		asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
		if (threadIdx.x == 0) {
			mbar_expect(kvbar, 2 * KVB);
			for (int h = 0; h < HD / 64; h++) {
				tma_load3(sk + h * BK * 128, &tk, kvbar, kcol + 64 * h, k0, b);
				tma_load3(sv + h * BK * 128, &tk, kvbar, vcol + 64 * h, k0, b);
			}
			for (int t = 0; t < ntile; t++) {
				int s = t & 1, hq = t / (nqt - qt0), q0 = (qt0 + t % (nqt - qt0)) * BM, hh = grp * per + hq;
				uint32_t fb = full0 + 8 * s;
				if (t >= 2)
					mbar_wait(empty0 + 8 * s, ((t >> 1) - 1) & 1);
				mbar_expect(fb, 2 * QB);
				for (int h = 0; h < HD / 64; h++) {
					tma_load3(sq0 + s * QB + h * BM * 128, &tq, fb, (grp * (per + 2) + hq) * HD + 64 * h, q0, b);
					tma_load3(so0 + s * QB + h * BM * 128, &tdo, fb, hh * HD + 64 * h, q0, b);
				}
			}
		} else if (MODE && threadIdx.x / 32 == 1) {
			// the dQ writer: each tile's fp32 dQ to the accumulator from its buffer. The
			// first key block to get there stores its tile (the accumulator is never
			// zeroed), and the others add theirs once that store is complete: MODE 1 draws
			// tickets (turn[at]) and flags the store (turn[ntq + at]); MODE 2's turns
			// make the last key block the first
			int64_t ntq = (int64_t)gridDim.z * g.np * nqt;
			for (int t = 0; t < ntile; t++) {
				int s = t & 1, qt = qt0 + t % (nqt - qt0), hh = grp * per + t / (nqt - qt0), first = 0;
				int64_t at = ((int64_t)b * g.np + hh) * nqt + qt;
				nbar_sync(NB_FULL + s, NB_N);
				if (threadIdx.x % 32 == 0) {
					if (MODE == 2) { // wait for the key blocks after this one
						int want = min(qt * BM / BK, (int)gridDim.x - 1) - kb;
						while (ld_acquire(turn + at) != want)
							;
						first = want == 0;
					} else if (!(first = atomicAdd(turn + at, 1) == 0)) {
						while (!ld_acquire(turn + ntq + at))
							;
					}
					asm volatile("fence.proxy.async.global;\n" ::: "memory");
					if (first)
						bulk_store(dqacc + at * (BM * HD), sdq + s * DQB, DQB);
					else
						bulk_add(dqacc + at * (BM * HD), sdq + s * DQB, DQB);
					bulk_wait_read();
				}
				__syncwarp();
				if (t + 2 < ntile)
					nbar_arrive(NB_FREE + s, NB_N);
				if (threadIdx.x % 32 == 0 && (MODE == 2 || first)) { // done: the next writers' turn
					bulk_wait();
					asm volatile("fence.proxy.async.global;\n"
						     "red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(turn + (MODE == 2 ? at : ntq + at))
						     : "memory");
				}
			}
			if (threadIdx.x % 32 == 0)
				bulk_wait();
		}
		return;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");

	int c = wg - 1, lane = threadIdx.x % 32, w = (threadIdx.x % 128) / 32, tc = 2 * (lane % 4);
	int kr0 = k0 + 64 * c + 16 * w + lane / 4; // this thread's key rows: kr0, kr0 + 8
	float dk[ND], dv[ND], st[BM / 2], dp[BM / 2], dq[32];
	unsigned pa[BM / 16][4], da[BM / 16][4];
#pragma unroll
	for (int i = 0; i < ND; i++)
		dk[i] = dv[i] = 0.0f;
	float nl = 0.0f, nd = 0.0f; // lse (log2 units) and D of the query (threadIdx.x % 128) of a tile
	auto cols_load = [&](int t) {
		int q = (qt0 + t % (nqt - qt0)) * BM + threadIdx.x % 128, hh = grp * per + t / (nqt - qt0);
		int64_t at = ((int64_t)b * g.np + hh) * g.T + q;
		if (threadIdx.x % 128 < BM && q < g.T)
			nl = lse[at] * LOG2E_F, nd = D[at];
		else
			nl = nd = 0.0f;
	};
	// pp: the two warpgroups take turns to issue S^T and dP^T (named barriers NB_PP + c:
	// consumer c's turn), so that the first one's softmax runs while the second one's
	// products do, and the second one's while the first one's dV and dK do; without the
	// turns both issue at once and run their softmax at the same time, the tensor cores idle.
	// The second starts by giving the first its turn and leaves out its last hand-over.
	auto turn_wait = [&]() {
		if (pp)
			nbar_sync(NB_PP + c, 256);
	};
	auto turn_pass = [&](int t) {
		if (pp && !(t == ntile - 1 && c == 1))
			nbar_arrive(NB_PP + 1 - c, 256);
	};
	// dS^T (da) to shared memory, query rows of this warpgroup's 64 keys (16-byte chunk
	// 2w + block % 2 of the row)
	auto ds_store = [&]() {
#pragma unroll
		for (int kk = 0; kk < BM / 16; kk++) {
			int m = lane / 8, q = 16 * kk + 8 * (m / 2) + lane % 8, ch = 2 * w + m % 2;
			stsm4t(sds + c * BM * 128 + q * 128 + ((ch ^ (q & 7)) << 4), da[kk]);
		}
		fence_async_smem();
	};
	// dV and dK of the tile done: its query and output-gradient stage s may be refilled
	auto dkv_done = [&](int s) {
		wgmma_wait<0>();
		wgmma_hold<ND>(dv);
		wgmma_hold<ND>(dk);
		if (lane == 0)
			mbar_arrive(empty0 + 8 * s);
	};
	// a 64 x 64 dQ product to the buffer db as the accumulator holds it, at rows r0 and columns
	// c0 of the tile: rows of HD floats, 16-byte chunk k of row r at chunk k ^ (r % 8) (two
	// wavefronts a store, the fewest for 256 bytes; dq_out reads whole rows)
	auto dq_store = [&](float *db, int r0, int c0) {
#pragma unroll
		for (int n = 0; n < 8; n++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int r = r0 + 16 * w + lane / 4 + 8 * h, col = c0 + 8 * n + tc;
				*(float2 *)(db + r * HD + (((col / 4) ^ (r & 7)) * 4) + col % 4) =
					make_float2(dq[4 * n + 2 * h], dq[4 * n + 2 * h + 1]);
			}
	};
	if (pp && c == 1)
		nbar_arrive(NB_PP, 256);
	cols_load(0);
	mbar_wait(kvbar, 0);
	for (int t = 0; t < ntile; t++) {
		int s = t & 1, q0 = (qt0 + t % (nqt - qt0)) * BM;
		uint32_t sq = sq0 + s * QB, so = so0 + s * QB;
		float *cl = cols + (c * 2 + s) * 2 * BM;

		// this tile's lse (log2 units) and D, a column each, for the warpgroup; the next
		// tile's loads go out now, to arrive while this tile computes
		if (threadIdx.x % 128 < BM) {
			cl[threadIdx.x % 128] = nl;
			cl[BM + threadIdx.x % 128] = nd;
		}
		wg_bar(1 + c);
		if (t + 1 < ntile)
			cols_load(t + 1);
		mbar_wait(full0 + 8 * s, (t >> 1) & 1);
		// at 64 queries a tile, the first tile of a key block lies wholly before the second
		// warpgroup's keys: its P and dS are zero, and only its (zero) part of dS is stored
		if (BM < BK && k0 + 64 * c >= q0 + BM) {
			turn_wait();
			turn_pass(t);
#pragma unroll
			for (int kk = 0; kk < BM / 16; kk++)
#pragma unroll
				for (int r = 0; r < 4; r++)
					da[kk][r] = 0u;
		} else {
			turn_wait();
			ss_kmajor<T, BM, HD>(st, sk + c * 64 * 128, BK, sq, BM);
			ss_kmajor<T, BM, HD>(dp, sv + c * 64 * 128, BK, so, BM);
			turn_pass(t);
			wgmma_wait<0>();
			wgmma_hold<BM / 2>(st);
			wgmma_hold<BM / 2>(dp);
			bool mask = q0 < k0 + 64 * c + 63 || q0 + BM > g.T || k0 + BK > g.T;
#pragma unroll
			for (int kk = 0; kk < BM / 16; kk++)
#pragma unroll
				for (int r = 0; r < 4; r++) {
					int n = 2 * kk + r / 2, e = 2 * (r % 2), j = kr0 + 8 * (r % 2);
					float p[2], ds[2];
#pragma unroll
					for (int u = 0; u < 2; u++) {
						int qc = 8 * n + tc + u, i = q0 + qc;
						p[u] = ex2(st[4 * n + e + u] * g.sl2 - cl[qc]);
						if (mask && (j > i || i >= g.T || j >= g.T))
							p[u] = 0.0f;
						ds[u] = p[u] * (dp[4 * n + e + u] - cl[BM + qc]);
						if constexpr (!FOLD)
							ds[u] *= g.scale;
					}
					pa[kk][r] = pack2<T>(p[0], p[1]);
					da[kk][r] = pack2<T>(ds[0], ds[1]);
				}
			rs_mn<T, HD, BM>(dv, pa, so);
			rs_mn<T, HD, BM>(dk, da, sq);
		}
		if constexpr (ALT) {
			// dS to shared memory; warpgroup t % 2 waits for the other's half and makes the
			// tile's whole dQ, the other goes on to its next tile without waiting
			const int d = t & 1;
			if (c == d && t > 0)
				nbar_sync(NB_DSFREE, 256);
			ds_store();
			if (c != d) {
				nbar_arrive(NB_DS, 256);
				dkv_done(s);
			} else {
				// dV and dK done first: their register operands (P^T, dS^T) and dQ's 64
				// accumulators do not fit together
				dkv_done(s);
				nbar_sync(NB_DS, 256);
				// in two products of 64 columns over the 128 keys, each stored before the
				// next is issued (both at once, or one product of 128 columns, make ptxas
				// spill or serialize)
				float *db = (float *)(smraw + (sdq + s * DQB - smem_u32(smraw)));
#pragma unroll 1
				for (int half = 0; half < 2; half++) {
					ss_dq<T>(dq, sds, BM, sk + half * BK * 128);
					wgmma_wait<0>();
					wgmma_hold<32>(dq);
					if (half == 1 && t + 1 < ntile)
						nbar_arrive(NB_DSFREE, 256);
					if (half == 0 && t >= 2)
						nbar_sync(NB_FREE + s, NB_N);
					dq_store(db, 0, 64 * half);
				}
				fence_async_smem();
				nbar_arrive(NB_FULL + s, NB_N);
			}
		} else if (MODE) {
			// dS to shared memory once the last tile's dQ products are done
			nbar_sync(NB_DS, 256);
			ds_store();
			nbar_sync(NB_DS, 256);
			// dQ of 64 queries (head size 64) or of 64 of the 128 columns (128)
			ss_dq<T>(dq, HD == 64 ? sds + c * 64 * 128 : sds, BM, HD == 64 ? sk : sk + c * BK * 128);
			wgmma_wait<1>();
			wgmma_hold<ND>(dv);
			wgmma_hold<ND>(dk);
			if (lane == 0)
				mbar_arrive(empty0 + 8 * s);
			wgmma_wait<0>();
			wgmma_hold<32>(dq);
			if (t >= 2)
				nbar_sync(NB_FREE + s, NB_N);
			dq_store((float *)(smraw + (sdq + s * DQB - smem_u32(smraw))), HD == 64 ? 64 * c : 0, HD == 64 ? 0 : 64 * c);
			fence_async_smem();
			nbar_arrive(NB_FULL + s, NB_N);
		} else {
			dkv_done(s);
		}
	}
	if constexpr (FOLD) // dS without the softmax scale: dK's (and dq_out's dQ) here
#pragma unroll
		for (int i = 0; i < ND; i++)
			dk[i] *= g.scale;
	if (pk) {
		// the key and value bias gradients' share of this block: its columns summed over
		// its keys (rows past the sequence hold zeros), in a fixed order: the thread's two
		// rows, the warp's eight row groups, then the eight warps through shared memory
		// (the query and output-gradient ring, free once both consumers are past it)
		constexpr int NC = HD / 4;
		float cs[2 * NC];
#pragma unroll
		for (int n = 0; n < HD / 8; n++)
#pragma unroll
			for (int u = 0; u < 2; u++) {
				cs[2 * n + u] = dk[4 * n + u] + dk[4 * n + 2 + u];
				cs[NC + 2 * n + u] = dv[4 * n + u] + dv[4 * n + 2 + u];
			}
#pragma unroll
		for (int i = 0; i < 2 * NC; i++) {
			cs[i] += __shfl_xor_sync(0xffffffffu, cs[i], 4);
			cs[i] += __shfl_xor_sync(0xffffffffu, cs[i], 8);
			cs[i] += __shfl_xor_sync(0xffffffffu, cs[i], 16);
		}
		float *red = (float *)(smraw + (sq0 - smem_u32(smraw))); // [8 warps][2 HD]
		nbar_sync(NB_BIAS, 256);
		if (lane < 4)
#pragma unroll
			for (int n = 0; n < HD / 8; n++)
#pragma unroll
				for (int u = 0; u < 2; u++) {
					red[(c * 4 + w) * 2 * HD + 8 * n + tc + u] = cs[2 * n + u];
					red[(c * 4 + w) * 2 * HD + HD + 8 * n + tc + u] = cs[NC + 2 * n + u];
				}
		nbar_sync(NB_BIAS, 256);
		int e = threadIdx.x - 128;
		if (e < 2 * HD) {
			float sum = 0.0f;
#pragma unroll
			for (int k = 0; k < 8; k++)
				sum += red[k * 2 * HD + e];
			pk[(((int64_t)b * gridDim.y + grp) * gridDim.x + kb) * 2 * HD + e] = sum;
		}
	}
#pragma unroll
	for (int h = 0; h < 2; h++) {
		int j = kr0 + 8 * h;
		if (j >= g.T)
			continue;
		T *row = dqkv + ((int64_t)b * g.T + j) * g.row + kcol;
		if (rope) // the inverse rotation of key position j: columns c and c + HD / 2 are n and n + HD / 16
#pragma unroll
			for (int n = 0; n < HD / 16; n++)
#pragma unroll
				for (int u = 0; u < 2; u++) {
					float2 cs = *(const float2 *)(rope + (int64_t)j * HD + 2 * (8 * n + tc + u));
					float x1 = dk[4 * n + 2 * h + u], x2 = dk[4 * (n + HD / 16) + 2 * h + u];
					dk[4 * n + 2 * h + u] = x1 * cs.x + x2 * cs.y;
					dk[4 * (n + HD / 16) + 2 * h + u] = x2 * cs.x - x1 * cs.y;
				}
#pragma unroll
		for (int n = 0; n < HD / 8; n++) {
			*(unsigned *)(row + 8 * n + tc) = pack2<T>(dk[4 * n + 2 * h], dk[4 * n + 2 * h + 1]);
			*(unsigned *)(row + HD + 8 * n + tc) = pack2<T>(dv[4 * n + 2 * h], dv[4 * n + 2 * h + 1]);
		}
	}
#endif
}

template <typename T, int HD>
__global__ void __launch_bounds__(THREADS, 1)
	fa3_bwd_dq(T *dqkv, const float *lse, const float *D, const __grid_constant__ CUtensorMap tq,
		   const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tdo, geo90 g)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	constexpr int BM = bm<HD>(), QB = BQ * HD * 2, KB = BM * HD * 2, ND = HD / 2;
	extern __shared__ unsigned char smraw[];
	uint32_t base = (smem_u32(smraw) + 1023u) & ~1023u;
	uint32_t sq = base, so = sq + QB, sk0 = so + QB, sv0 = sk0 + 2 * KB, bars = sv0 + 2 * KB;
	uint32_t qbar = bars, full0 = bars + 8, empty0 = bars + 8 + 16;
	int wg = threadIdx.x / 128, qt = gridDim.x - 1 - blockIdx.x, hh = blockIdx.y, b = blockIdx.z;
	int q0 = qt * BQ, nt = min((q0 + BQ + BM - 1) / BM, (g.T + BM - 1) / BM), grp = hh / g.per;
	int qcol = (grp * (g.per + 2) + hh % g.per) * HD, kcol = (grp * (g.per + 2) + g.per) * HD, vcol = kcol + HD;

	ring_init(bars, 2);
	if (wg == 0) {
		asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
		if (threadIdx.x == 0) {
			mbar_expect(qbar, 2 * QB);
			for (int h = 0; h < HD / 64; h++) {
				tma_load3(sq + h * BQ * 128, &tq, qbar, qcol + 64 * h, q0, b);
				tma_load3(so + h * BQ * 128, &tdo, qbar, hh * HD + 64 * h, q0, b);
			}
			for (int t = 0; t < nt; t++) {
				int s = t & 1;
				uint32_t fb = full0 + 8 * s;
				if (t >= 2)
					mbar_wait(empty0 + 8 * s, ((t >> 1) - 1) & 1);
				mbar_expect(fb, 2 * KB);
				for (int h = 0; h < HD / 64; h++) {
					tma_load3(sk0 + s * KB + h * BM * 128, &tk, fb, kcol + 64 * h, t * BM, b);
					tma_load3(sv0 + s * KB + h * BM * 128, &tk, fb, vcol + 64 * h, t * BM, b);
				}
			}
		}
		return;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");

	int c = wg - 1, lane = threadIdx.x % 32, w = (threadIdx.x % 128) / 32, tc = 2 * (lane % 4);
	int r0 = q0 + 64 * c + 16 * w + lane / 4, rlo = q0 + 64 * c;
	float dq[ND], st[BM / 2], dp[BM / 2], l2[2], dd[2];
	unsigned da[BM / 16][4];
#pragma unroll
	for (int i = 0; i < ND; i++)
		dq[i] = 0.0f;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		int i = r0 + 8 * h;
		int64_t at = ((int64_t)b * g.np + hh) * g.T + i;
		l2[h] = i < g.T ? lse[at] * LOG2E_F : 0.0f;
		dd[h] = i < g.T ? D[at] : 0.0f;
	}
	mbar_wait(qbar, 0);
	for (int t = 0; t < nt; t++) {
		int s = t & 1, j0 = t * BM;
		uint32_t sk = sk0 + s * KB, sv = sv0 + s * KB;

		mbar_wait(full0 + 8 * s, (t >> 1) & 1);
		ss_kmajor<T, BM, HD>(st, sq + c * 64 * 128, BQ, sk, BM);
		ss_kmajor<T, BM, HD>(dp, so + c * 64 * 128, BQ, sv, BM);
		wgmma_wait<0>();
		wgmma_hold<BM / 2>(st);
		wgmma_hold<BM / 2>(dp);
		bool mask = j0 + BM - 1 > rlo || j0 + BM > g.T;
#pragma unroll
		for (int kk = 0; kk < BM / 16; kk++)
#pragma unroll
			for (int r = 0; r < 4; r++) {
				int n = 2 * kk + r / 2, e = 2 * (r % 2), i = r0 + 8 * (r % 2);
				float ds[2];
#pragma unroll
				for (int u = 0; u < 2; u++) {
					int j = j0 + 8 * n + tc + u;
					float p = ex2(st[4 * n + e + u] * g.sl2 - l2[r % 2]);
					if (mask && (j > i || j >= g.T))
						p = 0.0f;
					ds[u] = p * (dp[4 * n + e + u] - dd[r % 2]) * g.scale;
				}
				da[kk][r] = pack2<T>(ds[0], ds[1]);
			}
		rs_mn<T, HD, BM>(dq, da, sk);
		wgmma_wait<0>();
		wgmma_hold<ND>(dq);
		if (lane == 0)
			mbar_arrive(empty0 + 8 * s);
	}
#pragma unroll
	for (int h = 0; h < 2; h++) {
		int i = r0 + 8 * h;
		if (i >= g.T)
			continue;
		T *row = dqkv + ((int64_t)b * g.T + i) * g.row + qcol;
#pragma unroll
		for (int n = 0; n < HD / 8; n++)
			*(unsigned *)(row + 8 * n + tc) = pack2<T>(dq[4 * n + 2 * h], dq[4 * n + 2 * h + 1]);
	}
#endif
}

// dQ from the five-product kernel's accumulator (tiles of bm<HD>() queries x HD columns,
// rows swizzled by 16-byte chunks as the writer left them): a block a tile, a thread 8
// columns of a row (two float4 in, 16 bytes out), four rows each. With pq, the tile's
// column sums too (the query bias gradients' share; fp32 before rounding, rows past the
// sequence left out): the thread's rows, then its column's threads in order.
// Every value is multiplied by mul first (bwd_fold's softmax scale, or 1).
// With rope, the inverse rotation of each query position: column c's partner c + HD / 2 is
// with the thread CP / 2 lanes away (every lane then runs every row, the rows past the
// sequence too, which the tile holds: the shuffles take the whole warp).
template <typename T, int HD>
__global__ void __launch_bounds__(256) dq_out(T *dqkv, const float *acc, float *pq, geo90 g, int nqt, const float *rope,
					      float mul)
{
	constexpr int BM = bm<HD>(), CP = HD / 8, RP = 256 / CP, NP = BM / RP;
	__shared__ float red[256][9];
	int64_t tile = blockIdx.x;
	int qt = (int)(tile % nqt), hh = (int)(tile / nqt % g.np), b = (int)(tile / nqt / g.np);
	int j = threadIdx.x % CP, r0 = threadIdx.x / CP;
	const float *ta = acc + tile * (BM * HD);
	T *base = dqkv + (int64_t)b * g.T * g.row + ((hh / g.per) * (g.per + 2) + hh % g.per) * HD + 8 * j;
	float cs[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
#pragma unroll
	for (int p = 0; p < NP; p++) {
		int r = r0 + p * RP, q = qt * BM + r;
		bool in = q < g.T;
		if (!rope && !in)
			break;
		float4 a = *(const float4 *)(ta + r * HD + (((2 * j) ^ (r & 7)) * 4));
		float4 c = *(const float4 *)(ta + r * HD + (((2 * j + 1) ^ (r & 7)) * 4));
		uint4 o;
		a.x *= mul, a.y *= mul, a.z *= mul, a.w *= mul, c.x *= mul, c.y *= mul, c.z *= mul, c.w *= mul;
		if (rope) {
			float x[8] = { a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w }, y[8];
			bool lo = j < CP / 2;
			const float4 *cs4 = (const float4 *)(rope + (int64_t)(in ? q : g.T - 1) * HD + 2 * (8 * (j % (CP / 2))));
#pragma unroll
			for (int k = 0; k < 8; k++)
				y[k] = __shfl_xor_sync(0xffffffffu, x[k], CP / 2);
#pragma unroll
			for (int k = 0; k < 4; k++) {
				float4 t = cs4[k]; // cos, sin of columns 2k and 2k + 1 of the eight
				x[2 * k] = lo ? x[2 * k] * t.x + y[2 * k] * t.y : x[2 * k] * t.x - y[2 * k] * t.y;
				x[2 * k + 1] = lo ? x[2 * k + 1] * t.z + y[2 * k + 1] * t.w : x[2 * k + 1] * t.z - y[2 * k + 1] * t.w;
			}
			a = make_float4(x[0], x[1], x[2], x[3]), c = make_float4(x[4], x[5], x[6], x[7]);
			if (!in)
				continue;
		}
		o.x = pack2<T>(a.x, a.y), o.y = pack2<T>(a.z, a.w), o.z = pack2<T>(c.x, c.y), o.w = pack2<T>(c.z, c.w);
		*(uint4 *)(base + (int64_t)q * g.row) = o;
		cs[0] += a.x, cs[1] += a.y, cs[2] += a.z, cs[3] += a.w;
		cs[4] += c.x, cs[5] += c.y, cs[6] += c.z, cs[7] += c.w;
	}
	if (!pq)
		return;
#pragma unroll
	for (int k = 0; k < 8; k++)
		red[threadIdx.x][k] = cs[k];
	__syncthreads();
	if (threadIdx.x < HD) {
		int e = threadIdx.x;
		float sum = 0.0f;
		for (int i = 0; i < RP; i++)
			sum += red[i * CP + e / 8][e % 8];
		pq[tile * HD + e] = sum;
	}
}

// dbias[c] += the column sums of the partial rows: a query column's from dq_out's tiles
// (pq[B][np][nqt][HD]), a key or value column's from the key blocks (pk[B][ng][nkb][2 HD]);
// a block takes 32 columns, its 32 row lanes every 32nd partial each, then the lanes in
// order
__global__ void __launch_bounds__(1024) qkv_bias_sum(float *dbias, const float *pq, const float *pk, int B, geo90 g,
						     int nqt, int nkb, int hd)
{
	__shared__ float sh[32][33];
	int c = blockIdx.x * 32 + threadIdx.x, ty = threadIdx.y, ng = g.np / g.per;
	int grp = c / ((g.per + 2) * hd), slot = c / hd % (g.per + 2), e = c % hd;
	float t = 0.0f;
	if (c < ng * (g.per + 2) * hd) {
		if (slot < g.per) {
			const float *p = pq + ((int64_t)grp * g.per + slot) * nqt * hd + e;
#pragma unroll 8
			for (int i = ty; i < B * nqt; i += 32)
				t += p[((int64_t)(i / nqt) * g.np * nqt + i % nqt) * hd];
		} else {
			const float *p = pk + (int64_t)grp * nkb * 2 * hd + (slot - g.per) * hd + e;
#pragma unroll 8
			for (int i = ty; i < B * nkb; i += 32)
				t += p[((int64_t)(i / nkb) * ng * nkb + i % nkb) * 2 * hd];
		}
	}
	sh[ty][threadIdx.x] = t;
	__syncthreads();
	if (ty == 0 && c < ng * (g.per + 2) * hd) {
		for (int k = 1; k < 32; k++)
			t += sh[k][threadIdx.x];
		dbias[c] += t;
	}
}

// cuTensorMapEncodeTiled from the driver, found through the runtime (no -lcuda)
PFN_cuTensorMapEncodeTiled_v12000 encode_fn(void)
{
	static PFN_cuTensorMapEncodeTiled_v12000 fn;
	static int tried;
	if (!tried) {
		void *p = NULL;
		cudaDriverEntryPointQueryResult q;
		tried = 1;
		if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
		    q == cudaDriverEntryPointSuccess)
			fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
	}
	return fn;
}

// whether this device runs the kernels above: compute capability 9.0 and sm_90a code in
// this binary (-1 unknown yet)
int usable(void)
{
	static int dev_ok = -1;
	// opts.sm90 0 (MT_ATTN_SM90=0): the mma.sync kernels, for comparisons
	if (!opts.sm90)
		return 0;
	if (dev_ok < 0) {
		int dev = 0, major = 0, minor = 0;
		dev_ok = cudaGetDevice(&dev) == cudaSuccess &&
			 cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
			 cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
			 minor == 0 && strstr(MT_CUDA_ARCHS, "sm_90a") && encode_fn();
	}
	return dev_ok;
}

// a three-dimensional tensor map (columns, positions, batch) of a [B][T][cols] buffer of
// 16-bit elements, boxes of 64 columns x rows positions, 128-byte swizzle
int mkmap(CUtensorMap *tm, CUtensorMapDataType dty, const void *p, int cols, int T_, int B, int rows)
{
	cuuint64_t dims[3] = { (cuuint64_t)cols, (cuuint64_t)T_, (cuuint64_t)B };
	cuuint64_t strides[2] = { (cuuint64_t)cols * 2, (cuuint64_t)cols * T_ * 2 };
	cuuint32_t box[3] = { 64, (cuuint32_t)rows, 1 }, es[3] = { 1, 1, 1 };
	CUresult r = encode_fn()(tm, dty, 3, (void *)p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
				 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	MT_REQUIRE(r == CUDA_SUCCESS, "attention: cuTensorMapEncodeTiled failed (%d)", (int)r);
	return 0;
}

template <typename T, int HD>
int fwd90(CUtensorMapDataType dty, void *y, float *lse, const void *qkv, int B, int T_, int np, int ng)
{
	CUtensorMap tm;
	int row = (np + 2 * ng) * HD;
	geo90 g = { T_, np, np / ng, row, LOG2E_F / sqrtf((float)HD), 1.0f / sqrtf((float)HD) };
	size_t smem = fwd_smem<HD>();
	const bool pp = opts.pingpong != 0; // 0: the warpgroups issue as they come
	const bool persist = opts.persist != 0;
	auto kern = pp ? (persist ? fa3_fwd<T, HD, true, true> : fa3_fwd<T, HD, true, false>)
		       : (persist ? fa3_fwd<T, HD, false, true> : fa3_fwd<T, HD, false, false>);

	if (mkmap(&tm, dty, qkv, row, T_, B, BQ))
		return -1;
	int64_t items = (int64_t)((T_ + BQ - 1) / BQ) * np * B, nsm = sm_count();
	int64_t grid = persist && items > nsm ? nsm : items, kv = (int64_t)T_ * HD * 2 * 2; // a head's K and V bytes
	// heads a group: the persistent grid (a block a head), else as many heads as take 16 MB of
	// keys and values (MT_ATTN_ORDER=0: the longest tiles of every head first, for comparisons)
	const bool order = opts.order != 0;
	int gh = !order ? 0 : persist ? (int)grid : (int)std::max<int64_t>(1, std::min<int64_t>((16 << 20) / kv, (int64_t)np * B));
	MT_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
	kern<<<(unsigned)grid, THREADS, smem, MT_STREAM>>>((T *)y, lse, tm, g, B, gh);
	MT_LAUNCH_CHECK("attention");
	return 0;
}

// the scratch: D (B * np * T floats, rounded up to 16 bytes), then the five-product
// backward's dQ accumulator (B np tp hd floats, tp = T rounded up to 128), its counters
// (two a query tile: 2 B np tp/64 ints), and the bias gradients' partial sums of the key
// blocks (B ng tp/128 2 hd) and of the query tiles (B np tp/64 hd)
int64_t d_floats(int B, int T_, int np) { return ((int64_t)B * np * T_ + 3) / 4 * 4; }
struct scr90 {
	float *acc;
	int *cnt;
	float *pk, *pq;
	int64_t floats; // all of it, D included
};
scr90 scr_at(float *D, int B, int T_, int np, int ng, int hd)
{
	int64_t tp = (T_ + 127) / 128 * 128, o[5];
	o[0] = d_floats(B, T_, np);
	o[1] = o[0] + (int64_t)B * np * tp * hd;
	o[2] = o[1] + 2 * (int64_t)B * np * (tp / 64);
	o[3] = o[2] + (int64_t)B * ng * (tp / 128) * 2 * hd;
	o[4] = o[3] + (int64_t)B * np * (tp / 64) * hd;
	scr90 r = { NULL, NULL, NULL, NULL, o[4] };
	if (D)
		r.acc = D + o[0], r.cnt = (int *)(D + o[1]), r.pk = D + o[2], r.pq = D + o[3];
	return r;
}

// rope: the rotation's inverse applied to the query and key gradients as they are written
// (the seven-product kernels leave it to mt_rope after them); the bias gradient then comes
// from mt_bias_grad over the rotated values
template <typename T, int HD, int MODE>
int bwd90(CUtensorMapDataType dty, void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B,
	  int T_, int np, int ng, float *dbias, float *D, const float *rope)
{
	CUtensorMap qm, q128, om, o128; // boxes of bm<HD>() and 128 rows
	constexpr int BM = bm<HD>();
	int row = (np + 2 * ng) * HD, rows = B * T_, nqt = (T_ + BM - 1) / BM, nkb = (T_ + BK - 1) / BK;
	geo90 g = { T_, np, np / ng, row, LOG2E_F / sqrtf((float)HD), 1.0f / sqrtf((float)HD) };
	size_t s1 = dkv_smem<HD, MODE>(), s2 = dq_smem<T, HD>();
	scr90 sc = scr_at(D, B, T_, np, ng, HD);
	bool fuse = dbias && MODE != 0 && !rope; // the seven-product kernels leave the bias to mt_bias_grad
	const float *kr = MODE != 0 ? rope : NULL;
	enum mt_dtype mdt = std::is_same<T, __half>::value ? MT_F16 : MT_BF16;

	if (mkmap(&qm, dty, qkv, row, T_, B, bm<HD>()) || mkmap(&q128, dty, qkv, row, T_, B, BK) ||
	    mkmap(&om, dty, dy, np * HD, T_, B, bm<HD>()) || mkmap(&o128, dty, dy, np * HD, T_, B, BQ))
		return -1;
	if (MODE) // the counters (the accumulator itself is stored before it is added to)
		MT_CUDA_CHECK(cudaMemsetAsync(sc.cnt, 0, (size_t)2 * B * np * nqt * sizeof(int), MT_STREAM));
	bwd_dsum<T, HD><<<(unsigned)(((int64_t)rows * np * (HD / 8) + 255) / 256), 256, 0, MT_STREAM>>>(
		D, (const T *)dy, (const T *)y, rows, np, T_);
	MT_LAUNCH_CHECK("attention");
	// the key/value blocks' order (not the fixed one): groups of as many (group, batch) pairs as make
	// about one block an SM, the longest blocks of a group first (MT_ATTN_ORDER=0: one pair's
	// key blocks after another's, for comparisons)
	const bool order = opts.order != 0;
	int gh = !order ? 0 : mt_attention_bwd_group > 0 ? mt_attention_bwd_group : std::max(1, sm_count() / nkb);
	// head size 128: each tile's dQ made whole by one consumer warpgroup, the two in turn, and
	// no turns to issue S^T and dP^T (the Llama-style model's backward 6% faster on an H200
	// than with halves and turns, 3% with turns kept). Head size 64 keeps the halves and the
	// turns: dQ by one warpgroup a tile gained nothing there. For comparisons:
	// MT_ATTN_BWD_ALT=0 (halves), MT_ATTN_BWD_PP=0 or 1 (the turns off or on)
	constexpr bool CAN_ALT = HD == 128 && MODE != 0;
	bool alt = CAN_ALT && (mt_attention_bwd_alt < 0 ? opts.bwd_alt != 0 : mt_attention_bwd_alt != 0);
	int bpp = opts.bwd_pp >= 0 ? opts.bwd_pp != 0 : !alt;
	auto kern = fa3_bwd_dkv<T, HD, MODE, false>;
	if constexpr (CAN_ALT)
		if (alt)
			kern = fa3_bwd_dkv<T, HD, MODE, true>;
	MT_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
	kern<<<dim3((unsigned)nkb, (unsigned)ng, (unsigned)B), THREADS, s1, MT_STREAM>>>(
		(T *)dqkv, lse, D, qm, q128, om, g, sc.acc, sc.cnt, fuse ? sc.pk : NULL, kr, gh, bpp);
	MT_LAUNCH_CHECK("attention");
	if constexpr (MODE != 0) {
		dq_out<T, HD><<<(unsigned)((int64_t)B * np * nqt), 256, 0, MT_STREAM>>>((T *)dqkv, sc.acc, fuse ? sc.pq : NULL, g,
											nqt, kr, bwd_fold<T, MODE>() ? g.scale : 1.0f);
		MT_LAUNCH_CHECK("attention");
	} else {
		MT_CUDA_CHECK(cudaFuncSetAttribute(fa3_bwd_dq<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
		fa3_bwd_dq<T, HD><<<dim3((unsigned)((T_ + BQ - 1) / BQ), (unsigned)np, (unsigned)B), THREADS, s2, MT_STREAM>>>(
			(T *)dqkv, lse, D, q128, qm, o128, g);
		MT_LAUNCH_CHECK("attention");
		if (rope && mt_rope(mdt, dqkv, rope, rows, T_, np, ng, HD, 1))
			return -1;
	}
	if (fuse) {
		qkv_bias_sum<<<(unsigned)((row + 31) / 32), dim3(32, 32), 0, MT_STREAM>>>(dbias, sc.pq, sc.pk, B, g, nqt, nkb, HD);
		MT_LAUNCH_CHECK("attention");
	} else if (dbias) { // D and the rest are free again by now (stream order)
		return mt_bias_grad(mdt, dbias, dqkv, rows, row, D);
	}
	return 0;
}

template <typename T, int HD>
int bwd90_mode(int mode, CUtensorMapDataType dty, void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv,
	       int B, int T_, int np, int ng, float *dbias, float *D, const float *rope)
{
	return mode == 0   ? bwd90<T, HD, 0>(dty, dqkv, dy, y, lse, qkv, B, T_, np, ng, dbias, D, rope)
	       : mode == 1 ? bwd90<T, HD, 1>(dty, dqkv, dy, y, lse, qkv, B, T_, np, ng, dbias, D, rope)
			   : bwd90<T, HD, 2>(dty, dqkv, dy, y, lse, qkv, B, T_, np, ng, dbias, D, rope);
}

} // namespace

// 0 when the sm_90a forward ran, 1 when it does not apply (the caller takes another path),
// -1 on a CUDA error
extern "C" int mt_attention_fwd_sm90(enum mt_dtype dt, void *y, float *lse, const void *qkv, int B, int T_, int np,
				     int ng, int hd)
{
	if (!mt_attention_sm90 || (dt != MT_BF16 && dt != MT_F16) || (hd != 64 && hd != 128) || !usable() ||
	    (uintptr_t)qkv % 16) // TMA reads from 16-byte aligned addresses
		return 1;
	if (dt == MT_BF16) {
		CUtensorMapDataType d = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
		return hd == 64 ? fwd90<__nv_bfloat16, 64>(d, y, lse, qkv, B, T_, np, ng)
				: fwd90<__nv_bfloat16, 128>(d, y, lse, qkv, B, T_, np, ng);
	}
	CUtensorMapDataType d = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
	return hd == 64 ? fwd90<__half, 64>(d, y, lse, qkv, B, T_, np, ng) : fwd90<__half, 128>(d, y, lse, qkv, B, T_, np, ng);
}

// the scratch mt_attention_bwd needs, in floats: D, and where the sm_90a backward may run,
// its accumulator, counters and partial sums (scr_at); with a bias gradient, at least what
// mt_bias_grad needs over a row of the QKV buffer (it runs after the attention's kernels)
extern "C" int64_t mt_attention_bwd_scratch_floats(enum mt_dtype dt, int B, int T_, int np, int ng, int hd, int bias)
{
	int64_t n = d_floats(B, T_, np), nb = bias ? mt_norm_scratch_floats(0, (int64_t)(np + 2 * ng) * hd) : 0;
	if ((dt == MT_BF16 || dt == MT_F16) && (hd == 64 || hd == 128) && usable())
		n = scr_at(NULL, B, T_, np, ng, hd).floats;
	return n > nb ? n : nb;
}

// 0 when the sm_90a backward ran, 1 when it does not apply, -1 on a CUDA error; scratch:
// mt_attention_bwd_scratch_floats
extern "C" int mt_attention_bwd_sm90(enum mt_dtype dt, void *dqkv, const void *dy, const void *y, const float *lse,
				     const void *qkv, int B, int T_, int np, int ng, int hd, float *dbias, float *scratch,
				     const float *rope)
{
	// MT_ATTN_SM90_BWD=0: the mma.sync backward; MT_ATTN_BWD7=1: seven products (comparisons)
	const bool off = !opts.sm90_bwd, seven = opts.bwd7 != 0;
	// TMA, 16-byte loads and stores
	uintptr_t al = (uintptr_t)qkv | (uintptr_t)dy | (uintptr_t)y | (uintptr_t)dqkv | (uintptr_t)rope;
	if (!mt_attention_sm90 || (dt != MT_BF16 && dt != MT_F16) || (hd != 64 && hd != 128) || !usable() || off || al % 16)
		return 1;
	int mode = seven ? 0 : mt_attention_deterministic ? 2 : 1;
	if (dt == MT_BF16) {
		CUtensorMapDataType d = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
		return hd == 64 ? bwd90_mode<__nv_bfloat16, 64>(mode, d, dqkv, dy, y, lse, qkv, B, T_, np, ng, dbias, scratch, rope)
				: bwd90_mode<__nv_bfloat16, 128>(mode, d, dqkv, dy, y, lse, qkv, B, T_, np, ng, dbias, scratch, rope);
	}
	CUtensorMapDataType d = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
	return hd == 64 ? bwd90_mode<__half, 64>(mode, d, dqkv, dy, y, lse, qkv, B, T_, np, ng, dbias, scratch, rope)
			: bwd90_mode<__half, 128>(mode, d, dqkv, dy, y, lse, qkv, B, T_, np, ng, dbias, scratch, rope);
}
