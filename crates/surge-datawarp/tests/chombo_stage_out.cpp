// Runs Chombo-Crunch's DataWarp stage-out of a plot file, exactly as its authors wrote it:
// the `#ifdef CH_DATAWARP` block is not in this file but is extracted from the paper that
// shows it (seed 001) by tests/datawarp.rs and included below, inside a function that
// defines what the block uses. Built with -DCH_DATAWARP against datawarp.h, -ldatawarp.
//
//   chombo_stage_out BB_PLOT_PREFIX PFS_PLOT_PREFIX STEP INTERVAL NCELLS
//
// writes nothing itself: the plot file BB_PLOT_PREFIX.nxNCELLS.stepSTEP.3d.hdf5 must exist
// in the burst buffer. After the block, waits for the stage; exit status 0 if it completed.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <datawarp.h>

static const int SpaceDim = 3;

static int write_plot_file(const std::string &m_plotFile, const std::string &m_LustrePlotFile, int m_curStep,
                           int m_copyPlotFromBurstBufferInterval, int ncells) {
#include "chombo_datawarp_block.inc"
    // The block's own variables are still in scope: wait for the stage it started, if any.
    if (!((m_curStep % m_copyPlotFromBurstBufferInterval == 0) && (m_copyPlotFromBurstBufferInterval > 0))) return 1;
    int rc = dw_wait_file_stage(bb_file_path);
    std::printf("staged %s -> %s: %d\n", bb_file_path, lustre_file_path, rc);
    int complete = -1, pending = -1, deferred = -1, failed = -1;
    if (dw_query_file_stage(bb_file_path, &complete, &pending, &deferred, &failed) != 0 || complete != 1) return 1;
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s BB_PLOT_PREFIX PFS_PLOT_PREFIX STEP INTERVAL NCELLS\n", argv[0]);
        return 2;
    }
    return write_plot_file(argv[1], argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
}
