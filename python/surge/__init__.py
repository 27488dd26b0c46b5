"""Surge's Python side: staging between the PFS and an instance (`surge.staging`) and workflow
coupling (`surge.workflow`: watch a directory's published files, consumer groups), bindings of
the C library libsurge; Darshan import for the provisioning simulator, the walltime and
node-allocation predictor, and plotting helpers. The data plane itself is in Rust (crates/).

The staging calls are also reachable as `surge.stage_file_out(...)` and so on; the C library is
loaded on first use, so the other tools work where it is not built. The base package needs only
the standard library; the other tools' dependencies are extras: `surge[predict]` (surge.predict,
surge-predict), `surge[sim]` (surge.darshan_trace, surge.sim_plots), `surge[demo]` (the
in-transit example)."""

_STAGING_NAMES = {
    "stage_file_in", "stage_dir_in", "stage_list_in",
    "stage_file_out", "stage_dir_out", "stage_list_out",
    "query_file_stage", "query_dir_stage", "query_list_stage",
    "wait_file_stage", "wait_dir_stage", "wait_list_stage",
    "terminate_file_stage", "terminate_dir_stage", "terminate_list_stage",
    "failed_stages", "StageError", "StageCounts", "IMMEDIATE", "AT_JOB_END", "REVOKE",
}


def __getattr__(name):
    if name in _STAGING_NAMES:
        from . import staging

        return getattr(staging, name)
    raise AttributeError(f"module 'surge' has no attribute '{name}'")
