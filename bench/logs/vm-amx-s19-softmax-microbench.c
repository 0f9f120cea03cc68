#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>
#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
TARGET static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 const n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 const y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}
TARGET static inline __m512 exp2_16(__m512 t) {
    __m512 const n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 const f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(0.001327647129073739f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009675541892647743f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05550713092088699f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022120237350464f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931469440460205f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
    return _mm512_scalef_ps(p, n);
}
static inline __mmask16 first16(size_t count) { return count >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u); }
TARGET static void old_sm(float *row, size_t length, float scale, size_t width, uint16_t *probs) {
    __m512 highest = _mm512_set1_ps(-3.402823466e38f);
    for (size_t j = 0; j < length; j += 16) highest = _mm512_max_ps(highest, _mm512_mask_loadu_ps(highest, first16(length - j), row + j));
    __m512 const scaled = _mm512_set1_ps(scale), shift = _mm512_set1_ps(-scale * _mm512_reduce_max_ps(highest));
    __m512 sums = _mm512_setzero_ps();
    for (size_t j = 0; j < length; j += 16) {
        __mmask16 const mask = first16(length - j);
        __m512 const e = exp16(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, row + j), scaled, shift));
        sums = _mm512_mask_add_ps(sums, mask, sums, e);
        _mm512_mask_storeu_ps(row + j, mask, e);
    }
    __m512 const inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sums));
    for (size_t j = 0; j < width; j += 32) {
        __m512 const low = _mm512_mul_ps(_mm512_maskz_loadu_ps(first16(length > j ? length - j : 0), row + j), inverse);
        __m512 const high = _mm512_mul_ps(_mm512_maskz_loadu_ps(first16(length > j + 16 ? length - j - 16 : 0), row + j + 16), inverse);
        _mm512_storeu_si512(probs + j, (__m512i)_mm512_cvtne2ps_pbh(high, low));
    }
}
TARGET static void new_sm(float *row, size_t length, float scale, size_t width, uint16_t *probs) {
    __m512 highest = _mm512_set1_ps(-3.402823466e38f);
    for (size_t j = 0; j < length; j += 16) highest = _mm512_max_ps(highest, _mm512_mask_loadu_ps(highest, first16(length - j), row + j));
    float const scale2 = scale * 1.44269504088896341f;
    __m512 const scaled = _mm512_set1_ps(scale2), shift = _mm512_set1_ps(-scale2 * _mm512_reduce_max_ps(highest));
    __m512 sums = _mm512_setzero_ps();
    for (size_t j = 0; j < length; j += 16) {
        __mmask16 const mask = first16(length - j);
        __m512 const e = exp2_16(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, row + j), scaled, shift));
        sums = _mm512_mask_add_ps(sums, mask, sums, e);
        _mm512_mask_storeu_ps(row + j, mask, e);
    }
    __m512 const inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sums));
    for (size_t j = 0; j < width; j += 32) {
        __m512 const low = _mm512_mul_ps(_mm512_maskz_loadu_ps(first16(length > j ? length - j : 0), row + j), inverse);
        __m512 const high = _mm512_mul_ps(_mm512_maskz_loadu_ps(first16(length > j + 16 ? length - j - 16 : 0), row + j + 16), inverse);
        _mm512_storeu_si512(probs + j, (__m512i)_mm512_cvtne2ps_pbh(high, low));
    }
}
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
    enum{L=128,R=128};
    static float base[R][L], a[R][L], b[R][L]; static uint16_t pa[R][L], pb[R][L];
    uint64_t s=1;
    for(int i=0;i<R;i++)for(int j=0;j<L;j++){s=s*6364136223846793005ull+1442695040888963407ull; base[i][j]=((double)(s>>11)/9007199254740992.0*2-1)*12;}
    double worst=0; int flips=0;
    memcpy(a,base,sizeof a); memcpy(b,base,sizeof b);
    for(int i=0;i<R;i++){old_sm(a[i],L,0.17f,L,pa[i]); new_sm(b[i],L,0.17f,L,pb[i]);}
    for(int i=0;i<R;i++)for(int j=0;j<L;j++){double d=fabs(a[i][j]-b[i][j])/a[i][j]; if(d>worst)worst=d; flips+=pa[i][j]!=pb[i][j];}
    printf("max rel diff of exp %.3g, bf16 P differing %d of %d\n",worst,flips,R*L);
    for(int round=0;round<3;round++){
      double t0=now(); for(int it=0;it<2000;it++){memcpy(a,base,sizeof a); for(int i=0;i<R;i++) old_sm(a[i],L,0.17f,L,pa[i]);} double t1=now();
      for(int it=0;it<2000;it++){memcpy(b,base,sizeof b); for(int i=0;i<R;i++) new_sm(b[i],L,0.17f,L,pb[i]);} double t2=now();
      printf("old %.1f ns/row, new %.1f ns/row, ratio %.2f\n",(t1-t0)/2000/R*1e9,(t2-t1)/2000/R*1e9,(t1-t0)/(t2-t1));
    }
}
