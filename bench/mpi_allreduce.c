/* Open MPI baseline for bench/allreduce.cc: times MPI_Allreduce (float,
 * MPI_SUM, in place) with the same sizes, iteration schedule and buffer
 * refill as the lockstep workers. Compiled at bench time with `mpicc -O2`
 * (never through Bazel: MPI is not a build dependency of //...).
 *
 * Usage: mpi_allreduce SIZE_BYTES...
 * Prints, on rank 0, one line per size:
 *   RESULT <bytes> <iterations> <median_us> <min_us>
 * and exits non-zero if a result is wrong. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Must match IterationsFor/WarmupFor in allreduce.cc. */
static int iterations_for(long bytes) {
  long it = (128L << 20) / bytes;
  if (it < 6) it = 6;
  if (it > 500) it = 500;
  return (int)it;
}
static int warmup_for(long bytes) {
  int it = iterations_for(bytes) / 10;
  return it < 2 ? 2 : it;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, k;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &k);
  long max_bytes = 0;
  for (int i = 1; i < argc; ++i) {
    long b = atol(argv[i]);
    if (b > max_bytes) max_bytes = b;
  }
  /* Allocated and first touched once, reused for every size. */
  float* buf = malloc(max_bytes > 0 ? (size_t)max_bytes : 4);
  if (buf == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  memset(buf, 0, (size_t)max_bytes);
  int status = 0;
  for (int a = 1; a < argc; ++a) {
    const long bytes = atol(argv[a]);
    const long n = bytes / (long)sizeof(float);
    const int warm = warmup_for(bytes), iters = iterations_for(bytes);
    double* t = malloc(sizeof(double) * (size_t)iters);
    const float mine = (float)(rank + 1);
    const float want = (float)k * (float)(k + 1) / 2.0f;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < warm + iters; ++i) {
      for (long j = 0; j < n; ++j) buf[j] = mine;
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      const double t1 = MPI_Wtime();
      if (i >= warm) t[i - warm] = t1 - t0;
    }
    for (long j = 0; j < n; ++j) {
      if (buf[j] != want) {
        fprintf(stderr, "rank %d: size %ld: element %ld is %g, expected %g\n",
                rank, bytes, j, buf[j], want);
        status = 1;
        break;
      }
    }
    if (rank == 0) {
      qsort(t, (size_t)iters, sizeof(double), cmp_double);
      printf("RESULT %ld %d %.3f %.3f\n", bytes, iters, t[iters / 2] * 1e6,
             t[0] * 1e6);
      fflush(stdout);
    }
    free(t);
  }
  free(buf);
  MPI_Finalize();
  return status;
}
