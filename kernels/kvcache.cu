// kvcache.cu: rotary positions and the key/value cache append of inference (see kvcache.h).
//
// One block a row: the rotation pairs (i, i + hd/2) of every query and key head, a pair a
// thread, the rotated keys written to the cache by the thread that rotated them; then
// the value heads copied.
#include "kvcache.h"

#include "common.cuh"

template <typename T>
__global__ void kv_append_k(T *qkv, T *kc, T *vc, const int32_t *slot, const int32_t *pos, const float *cs, int np,
			    int ng, int hd, int max_len)
{
	int64_t r = blockIdx.x, sl = slot[r];
	int p = pos[r], per = np / ng, half = hd / 2;
	T *row = qkv + r * (int64_t)(np + 2 * ng) * hd;

	if (cs) {
		for (int idx = threadIdx.x; idx < (np + ng) * half; idx += blockDim.x) {
			int hh = idx / half, i = idx % half, off;
			float c = cs[((int64_t)p * half + i) * 2], s = cs[((int64_t)p * half + i) * 2 + 1], x1, x2;
			T y1, y2;
			if (hh < np)
				off = ((hh / per) * (per + 2) + hh % per) * hd;
			else
				off = ((hh - np) * (per + 2) + per) * hd;
			x1 = to_f(row[off + i]);
			x2 = to_f(row[off + i + half]);
			y1 = from_f<T>(x1 * c - x2 * s);
			y2 = from_f<T>(x2 * c + x1 * s);
			row[off + i] = y1;
			row[off + i + half] = y2;
			if (hh >= np) {
				T *k = kc + ((sl * ng + (hh - np)) * max_len + p) * hd;
				k[i] = y1;
				k[i + half] = y2;
			}
		}
	} else {
		for (int idx = threadIdx.x; idx < ng * hd; idx += blockDim.x) {
			int g = idx / hd, d = idx % hd;
			kc[((sl * ng + g) * max_len + p) * hd + d] = row[(g * (per + 2) + per) * hd + d];
		}
	}
	for (int idx = threadIdx.x; idx < ng * hd; idx += blockDim.x) {
		int g = idx / hd, d = idx % hd;
		vc[((sl * ng + g) * max_len + p) * hd + d] = row[(g * (per + 2) + per + 1) * hd + d];
	}
}

template <typename T>
static int kv_append(void *qkv, void *kc, void *vc, const int32_t *slot, const int32_t *pos, const float *cs, int64_t N,
		     int np, int ng, int hd, int max_len)
{
	kv_append_k<T><<<(unsigned)N, 128, 0, MT_STREAM>>>((T *)qkv, (T *)kc, (T *)vc, slot, pos, cs, np, ng, hd, max_len);
	MT_LAUNCH_CHECK("kv_append");
	return 0;
}

extern "C" int mt_kv_append(enum mt_dtype dt, void *qkv, void *kc, void *vc, const int32_t *slot, const int32_t *pos,
			    const float *cs, int64_t N, int np, int ng, int hd, int max_len)
{
	MT_REQUIRE(N > 0 && N < (1ll << 31) && ng > 0 && np % ng == 0 && hd > 0 && hd % 2 == 0 && max_len > 0,
		   "kv_append: bad shape");
	return MT_DISPATCH(dt, kv_append, qkv, kc, vc, slot, pos, cs, N, np, ng, hd, max_len);
}
