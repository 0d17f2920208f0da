// Checkpoints of a sharded store: each rank saves its shard to its own file, named by the global
// epoch, then rank 0 replaces the manifest (atomically), which names that epoch, the number of
// ranks and each shard's own epoch; the previous save's shard files go after. Loading reads the
// manifest on every rank and refuses another number of ranks: an id's owner depends on it.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/check.hpp"
#include "core/checkpoint.hpp"
#include "mpi/distributed_engine.hpp"

namespace streamknn::detail {

namespace {

constexpr const char* kMagic = "streamknn sharded checkpoint 1";

[[noreturn]] void fail_manifest(const std::string& path, const std::string& why) {
  throw CheckpointError(concat("DistributedReferenceSet::load: ", path, ": ", why), path, "manifest", 0);
}

}  // namespace

std::string shard_file(const std::string& path, std::uint64_t epoch, int rank, int ranks) {
  return concat(path, ".epoch-", epoch, ".rank-", rank, "-of-", ranks);
}

Manifest read_manifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail_manifest(path, "cannot open the manifest (no sharded checkpoint here)");
  std::string line;
  if (!std::getline(in, line) || line != kMagic) fail_manifest(path, concat("not a manifest (first line is not '", kMagic, "')"));
  Manifest m;
  std::string word;
  if (!(in >> word >> m.ranks) || word != "ranks" || m.ranks < 1) fail_manifest(path, "bad 'ranks' line");
  if (!(in >> word >> m.epoch) || word != "epoch") fail_manifest(path, "bad 'epoch' line");
  m.shard_epochs.resize(std::size_t(m.ranks));
  for (int r = 0; r < m.ranks; ++r) {
    int rank = -1;
    if (!(in >> word >> rank >> m.shard_epochs[std::size_t(r)]) || word != "shard" || rank != r) {
      fail_manifest(path, concat("bad 'shard ", r, "' line"));
    }
  }
  return m;
}

void DistributedEngine::run_save(const std::string& path) {
  constexpr const char* kSave = "DistributedReferenceSet::save";
  CallHeader mine;
  mine.kind = CallHeader::Save;
  exchange_headers(mine, kSave);
  MPI_Comm comm = comm_->get();
  const int rank = comm_->rank(), ranks = comm_->size();
  const std::uint64_t global = epoch();
  std::uint64_t previous = global;
  try {
    const Manifest old = read_manifest(path);
    if (old.ranks == ranks) previous = old.epoch;
  } catch (const CheckpointError&) {
    // no previous save (or not one of this job's): nothing to remove afterwards
  }

  mpi::Failure saved;
  try {
    shard_->save(shard_file(path, global, rank, ranks));
  } catch (...) {
    saved = mpi::failure_of(std::current_exception());
  }
  mpi::agree(comm, saved, concat(kSave, ": the previous checkpoint stands; a shard could not be saved on"));
  const std::vector<std::uint64_t> shard_epochs = mpi::allgather<std::uint64_t>(comm, shard_->epoch());

  mpi::Failure committed;
  if (rank == 0) {
    try {
      write_file_atomically(path, kSave, [&](ByteSink& sink) {
        std::ostringstream text;
        text << kMagic << "\nranks " << ranks << "\nepoch " << global << "\n";
        for (int r = 0; r < ranks; ++r) text << "shard " << r << " " << shard_epochs[std::size_t(r)] << "\n";
        const std::string bytes = text.str();
        sink.write(bytes.data(), bytes.size());
      });
    } catch (...) {
      committed = mpi::failure_of(std::current_exception());
    }
  }
  mpi::agree(comm, committed, concat(kSave, ": the previous checkpoint stands; the manifest could not be written on"));
  if (previous != global) std::remove(shard_file(path, previous, rank, ranks).c_str());
}

DistributedEngine::DistributedEngine(MPI_Comm comm, const std::string& path, const LoadOptions& options) {
  constexpr const char* kLoad = "DistributedReferenceSet::load";
  check_mpi_initialised();
  comm_ = std::make_unique<mpi::Comm>(comm);
  local_rank_ = mpi::local_rank(comm_->get());
  const int rank = comm_->rank(), ranks = comm_->size();
  Manifest manifest;
  mpi::Failure read;
  try {
    manifest = read_manifest(path);
    if (manifest.ranks != ranks) {
      fail_manifest(path, concat("saved by ", manifest.ranks, " ranks, loaded on ", ranks,
                                 ": a sharded checkpoint loads on the same number of ranks (an id's owner depends on "
                                 "it; no re-sharding)"));
    }
  } catch (...) {
    read = mpi::failure_of(std::current_exception());
  }
  mpi::agree(comm_->get(), read, concat(kLoad, ": the manifest was refused on"));

  mpi::Failure built;
  try {
    LoadOptions local = options;
    if (options.backend != BackendKind::Cpu) {
      if (const int gpus = visible_gpus(); gpus > 0) local.cuda_device = local_rank_ % gpus;
    }
    const std::string file = shard_file(path, manifest.epoch, rank, ranks);
    LoadReport report;
    shard_.emplace(ReferenceSet::load(file, local, &report));
    if (report.checkpoint_epoch != manifest.shard_epochs[std::size_t(rank)]) {
      throw CheckpointError(concat(kLoad, ": ", file, " holds the shard's epoch ", report.checkpoint_epoch,
                                   " but the manifest names ", manifest.shard_epochs[std::size_t(rank)],
                                   " (a file of another save)"),
                            file, "header", 0);
    }
  } catch (...) {
    built = mpi::failure_of(std::current_exception());
  }
  check_shards(built);
  check_configs(config_);
  epoch_.store(manifest.epoch, std::memory_order_release);
  std::uint64_t total = 0;
  for (const std::uint64_t n : mpi::allgather<std::uint64_t>(comm_->get(), shard_->size())) total += n;
  size_.store(total, std::memory_order_release);
  start();
}

}  // namespace streamknn::detail
