// embed.cu: embedding lookup and its deterministic backward (see embed.h).
#include "embed.h"

#include "common.cuh"

template <typename T>
__global__ void embed_fwd_k(T *x, const int32_t *tok, const int32_t *pos, const T *wte, const T *wpe, int64_t N,
			    int T_, int h)
{
	int64_t n = blockIdx.x, p = pos ? pos[n] : n % T_;
	const T *e = wte + (int64_t)tok[n] * h;

	for (int i = threadIdx.x; i < h; i += blockDim.x) {
		float v = to_f(e[i]);
		if (wpe)
			v += to_f(wpe[p * h + i]);
		x[n * h + i] = from_f<T>(v);
	}
}

template <typename T>
__global__ void embed_bwd_tok_k(float *gwte, const T *dx, const int32_t *u_tok, const int32_t *start,
				const int32_t *pos, int h)
{
	int k = blockIdx.x, i = blockIdx.y * blockDim.x + threadIdx.x;
	float s = 0;

	if (i >= h)
		return;
	for (int j = start[k]; j < start[k + 1]; j++)
		s += to_f(dx[(int64_t)pos[j] * h + i]);
	gwte[(int64_t)u_tok[k] * h + i] += s;
}

template <typename T>
__global__ void embed_bwd_pos_k(float *gwpe, const T *dx, int64_t N, int T_, int h)
{
	int t = blockIdx.x, i = blockIdx.y * blockDim.x + threadIdx.x;
	float s = 0;

	if (i >= h)
		return;
	for (int64_t n = t; n < N; n += T_)
		s += to_f(dx[n * h + i]);
	gwpe[(int64_t)t * h + i] += s;
}

template <typename T>
static int embed_fwd(void *x, const int32_t *tok, const int32_t *pos, const void *wte, const void *wpe, int64_t N,
		     int64_t T_, int64_t h)
{
	embed_fwd_k<T><<<(unsigned)N, 256, 0, MT_STREAM>>>((T *)x, tok, pos, (const T *)wte, (const T *)wpe, N, (int)T_,
							  (int)h);
	MT_LAUNCH_CHECK("embed_fwd");
	return 0;
}

template <typename T>
static int embed_bwd(float *gwte, float *gwpe, const void *dx, const int32_t *u_tok, const int32_t *start,
		     const int32_t *pos, int64_t nuniq, int64_t N, int64_t T_, int64_t h)
{
	unsigned cols = (unsigned)((h + 255) / 256);

	if (nuniq > 0) {
		embed_bwd_tok_k<T><<<dim3((unsigned)nuniq, cols), 256, 0, MT_STREAM>>>(gwte, (const T *)dx, u_tok, start, pos, (int)h);
		MT_LAUNCH_CHECK("embed_bwd");
	}
	if (gwpe) {
		embed_bwd_pos_k<T><<<dim3((unsigned)T_, cols), 256, 0, MT_STREAM>>>(gwpe, (const T *)dx, N, (int)T_, (int)h);
		MT_LAUNCH_CHECK("embed_bwd");
	}
	return 0;
}

extern "C" int mt_embed_fwd(enum mt_dtype dt, void *x, const int32_t *tok, const void *wte, const void *wpe, int64_t N,
			    int64_t T_, int64_t h)
{
	MT_REQUIRE(N > 0 && N < (1ll << 31) && T_ > 0 && N % T_ == 0 && h > 0, "embed: bad shape");
	return MT_DISPATCH(dt, embed_fwd, x, tok, (const int32_t *)NULL, wte, wpe, N, T_, h);
}

extern "C" int mt_embed_rows(enum mt_dtype dt, void *x, const int32_t *tok, const int32_t *pos, const void *wte,
			     const void *wpe, int64_t N, int64_t h)
{
	MT_REQUIRE(N > 0 && N < (1ll << 31) && h > 0, "embed: bad shape");
	return MT_DISPATCH(dt, embed_fwd, x, tok, pos, wte, wpe, N, (int64_t)1, h);
}

extern "C" int mt_embed_bwd(enum mt_dtype dt, float *gwte, float *gwpe, const void *dx, const int32_t *u_tok,
			    const int32_t *start, const int32_t *pos, int64_t nuniq, int64_t N, int64_t T_, int64_t h)
{
	MT_REQUIRE(N > 0 && N < (1ll << 31) && T_ > 0 && N % T_ == 0 && h > 0 && nuniq < (1ll << 31), "embed: bad shape");
	return MT_DISPATCH(dt, embed_bwd, gwte, gwpe, dx, u_tok, start, pos, nuniq, N, T_, h);
}
