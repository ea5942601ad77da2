#!/usr/bin/env bash
# A stand-in for ssh that lets Open MPI run one job as several emulated hosts on this machine:
# mpirun --mca plm_rsh_agent scripts/emulated_node_ssh.sh --host nodea:2,nodeb:2 ... "logs in"
# to nodea and nodeb by running the command here in a new UTS namespace named after the host.
# Open MPI then uses shared memory (vader) inside each emulated host and TCP between them, and
# trnccl sees two hosts by their names: the same 2 x 2 layout for both. Needs root (unshare).
# Pass --bind-to none and --mca mpi_yield_when_idle 1 as well: each emulated host thinks it
# owns every core of the machine. Usage (by mpirun): emulated_node_ssh.sh [ssh options] HOST CMD
while [[ "${1:-}" == -* ]]; do shift; done
host="${1:?emulated_node_ssh: no host name}"
shift
exec unshare --uts bash -c 'hostname "$0" && exec bash -c "$1"' "$host" "$*"
