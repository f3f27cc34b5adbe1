/*
 * gridtrain/binding.h - which GPU a rank drives.
 *
 * The node-local rank picks the device: device = local_rank mod (devices
 * this process sees). CUDA_VISIBLE_DEVICES and Slurm's GPU binding
 * (--gpu-bind, --gpus-per-task), which set it per task, are honoured because
 * the CUDA runtime counts only the visible devices: a rank that sees one GPU
 * drives that one. More ranks than GPUs on a node is allowed; ranks then
 * share GPUs round robin (how the tests run layouts on one GPU).
 *
 * Nothing here is collective and nothing here needs CUDA: the trainer
 * computes the node-local rank with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)
 * and passes it to gt_backend_create_local; callers without MPI get it from
 * the launcher's environment.
 */
#ifndef GRIDTRAIN_BINDING_H
#define GRIDTRAIN_BINDING_H

#include <stdbool.h>

/* The node-local rank as the launcher exports it: MPI_LOCALRANKID (MPICH's
 * Hydra), SLURM_LOCALID (srun), OMPI_COMM_WORLD_LOCAL_RANK (Open MPI),
 * looked for in that order. *rank = 0 and false when none is set; an
 * invalid value (not a non-negative integer) is skipped. */
bool gt_binding_local_rank_from_env(int *rank);

/* The device for node-local rank local_rank when the process sees ndev
 * devices: local_rank mod ndev. GT_ERR_INPUT when ndev < 1 (no GPU) or
 * local_rank < 0. */
int gt_binding_pick(int local_rank, int ndev, int *device);

/* How many node-local ranks share each device when local_size ranks run on
 * a node with ndev visible devices: ceil(local_size / ndev) (0 when ndev < 1). */
int gt_binding_ranks_per_device(int local_size, int ndev);

#endif /* GRIDTRAIN_BINDING_H */
