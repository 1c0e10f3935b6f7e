/* hpcwizard verify: an MPI all-reduce across two instances (cluster/mpi-transport). */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, one = 1, sum = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("HPCWIZARD-MPI size=%d sum=%d\n", size, sum);
  MPI_Finalize();
  return sum == size ? 0 : 1;
}
