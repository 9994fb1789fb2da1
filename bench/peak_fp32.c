/* Measures this machine's fp32 peak: independent fused multiply-add chains on
 * every core, in the widest vectors the compiler targets (-march=native).
 * Prints GFLOP/s for one thread and for all threads (OpenMP-free: pthreads).
 * Build with -O3: at -O2 GCC keeps the accumulator array in memory (a third of peak).
 * Usage: peak_fp32 [threads] [seconds-per-run] */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SET1 _mm512_set1_ps
#define ADD _mm512_add_ps
#define REDUCE(v) _mm512_reduce_add_ps(v)
#elif defined(__FMA__)
typedef __m256 vec;
#define LANES 8
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SET1 _mm256_set1_ps
#define ADD _mm256_add_ps
static float REDUCE(__m256 v) { float f[8]; _mm256_storeu_ps(f, v); float s = 0; for (int i = 0; i < 8; ++i) s += f[i]; return s; }
#else
#error "peak_fp32 needs FMA (build with -march=native on an x86-64 with FMA)"
#endif

#define CHAINS 12  /* enough independent chains to cover FMA latency x ports */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct { long iters; float sink; } job;

static void* run(void* p) {
  job* j = (job*)p;
  vec acc[CHAINS];
  for (int c = 0; c < CHAINS; ++c) acc[c] = SET1(0.001f * c);
  const vec a = SET1(0.999999f), b = SET1(1e-7f);
  for (long i = 0; i < j->iters; ++i) {
    for (int c = 0; c < CHAINS; ++c) acc[c] = FMA(acc[c], a, b);
  }
  vec s = acc[0];
  for (int c = 1; c < CHAINS; ++c) s = ADD(s, acc[c]);
  j->sink = REDUCE(s);
  return NULL;
}

static double gflops(int threads, long iters) {
  pthread_t t[256];
  job jobs[256];
  double start = now();
  for (int i = 0; i < threads; ++i) {
    jobs[i].iters = iters;
    pthread_create(&t[i], NULL, run, &jobs[i]);
  }
  for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  double secs = now() - start;
  return 2.0 * LANES * CHAINS * (double)iters * threads / secs * 1e-9;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  double target = argc > 2 ? atof(argv[2]) : 0.3;
  if (threads < 1 || threads > 256) threads = 1;
  long iters = 1000000;
  while (1) {  /* calibrate: one run of about `target` seconds */
    double start = now();
    gflops(1, iters);
    double secs = now() - start;
    if (secs > target / 4) { iters = (long)(iters * target / secs); break; }
    iters *= 4;
  }
  double best1 = 0, bestn = 0;
  for (int r = 0; r < 3; ++r) {
    double g1 = gflops(1, iters), gn = gflops(threads, iters);
    if (g1 > best1) best1 = g1;
    if (gn > bestn) bestn = gn;
  }
  printf("%d %.1f %.1f\n", LANES * 32, best1, bestn);
  return 0;
}
