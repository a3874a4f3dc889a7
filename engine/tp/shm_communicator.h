// The CPU ranks' collectives: all-reduce, broadcast and barrier through the tp segment's
// reduce buffers and arrival counter (what TpGroup::communicator() is for more than one
// CPU rank). Every rank adds the same buffers in the same order, so every rank gets the
// same bits. A wait that outlives its epoch or a member fails (TpGroup::wait_check),
// never hangs.
#pragma once

#include <memory>

#include "engine/core/communicator.h"

namespace hearth {

class TpGroup;

std::unique_ptr<EpochCommunicator> make_shm_communicator(TpGroup& group);

}  // namespace hearth
