/* hpcwizard verify: two ranks on one instance exchange 1 MiB each way (MPI_Send/MPI_Recv),
   far above the eager limits (Open MPI's vader/sm 4 KiB, UCX's rendezvous threshold): the
   transfer takes the single-copy path (CMA) when it is on, two copies through /dev/shm
   when it is off. Exit 0 when both ranks got every byte. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define BYTES (1 << 20)

static int filled(const unsigned char *buf, int seed) {
  int bad = 0;
  for (int i = 0; i < BYTES; i++) bad += buf[i] != (unsigned char)(i * 7 + seed);
  return bad;
}

int main(int argc, char **argv) {
  int rank, size, bad = 0, peer_bad = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  unsigned char *buf = malloc(BYTES);
  if (size != 2 || buf == NULL) {
    if (rank == 0) printf("HPCWIZARD-MPI-PAIR needs 2 ranks, got %d\n", size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int peer = 1 - rank;
  for (int i = 0; i < BYTES; i++) buf[i] = (unsigned char)(i * 7 + rank);
  if (rank == 0) {
    MPI_Send(buf, BYTES, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    MPI_Recv(buf, BYTES, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    unsigned char *in = malloc(BYTES);
    MPI_Recv(in, BYTES, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(buf, BYTES, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
    for (int i = 0; i < BYTES; i++) buf[i] = in[i];
    free(in);
  }
  bad = filled(buf, peer);
  MPI_Reduce(&bad, &peer_bad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("HPCWIZARD-MPI-PAIR bytes=%d wrong=%d\n", BYTES, peer_bad);
  free(buf);
  MPI_Finalize();
  return peer_bad != 0;
}
