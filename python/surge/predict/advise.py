"""Pre-staging advisor: can a queued job's input be staged onto its nodes before it starts?

Staging ``B`` bytes at ``bandwidth`` takes ``B / bandwidth`` seconds, and it has to begin that
long before the job starts, on the nodes the job will get. The advisor replays the trace up to
the job's submission (later submissions are unknown at that moment) under the chosen policy
and walltime estimates, takes the scheduler's prediction for the job, and answers:

* **can stage** - the predicted wait is at least the staging time (plus a safety margin);
  pre-staging is *advised* only if, in addition, the confidence reaches ``min_confidence``;
* **when to begin** - predicted start - staging time - margin;
* **confidence** - among the earlier jobs of the same simulation that waited at least the
  staging time, the share whose final node list was already predicted that long before they
  started (lead time >= staging time): how often staging begun at that moment would have gone
  to the right nodes. When the job is not predicted to wait that long, or no earlier job did,
  there is no such figure, and the advice says which of the two is the case instead.

The scheduler's walltimes default to the ``cautious`` model (:class:`.models.Cautious`): a
plan built on estimates that are rarely too short changes less, so its node lists hold
longer. Estimates ``lambda=X`` with X < 1 are computed from each job's *true* runtime, which
nobody knows at submission: the advice then is an oracle what-if, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .simulate import simulate
from .traces import Trace

#: Confidence is estimated over at most this many of the most recent earlier jobs.
HISTORY_JOBS = 5000
#: Fewer earlier jobs than this that waited as long are too few to give a confidence.
MIN_EVIDENCE = 10


@dataclass
class Advice:
    job_id: int
    submit: float
    prediction_made: float
    stage_seconds: float
    predicted_start: float
    predicted_nodes: list[str]
    can_stage: bool
    advised: bool
    begin_at: float | None
    confidence: float
    confidence_jobs: int
    simulated_start: float
    simulated_nodes_match: bool
    #: Jobs submitted earlier whose outcome was known at the submission.
    history_jobs: int = 0
    #: How the scheduler's walltimes were made, e.g. "cautious" or "lambda=0.1".
    estimate: str = ""
    #: True when the estimate used the jobs' true runtimes (lambda < 1).
    oracle: bool = False
    #: The wait the trace records for the job (NaN when it records none).
    real_wait: float = float("nan")
    #: Whether the trace's real node list equals the predicted one (None: not recorded).
    real_nodes_match: bool | None = None
    submitted_at: str = ""

    def render(self) -> str:
        wait = self.predicted_start - self.submit
        needed_text = _duration(self.stage_seconds)
        lines = [
            f"job                      {self.job_id}"
            + (f" (submitted {self.submitted_at})" if self.submitted_at else ""),
            f"walltimes planned with   {self.estimate}"
            + (" - ORACLE: each job's true runtime, unknown at submission (what-if only; "
               "--estimate lambda<1 needs --oracle)" if self.oracle else ""),
            f"staging time             {needed_text}",
            f"predicted start          submit + {_duration(wait)}"
            + (f" (predicted at submit + {_duration(self.prediction_made - self.submit)}, when "
               "it entered the planning window)" if self.prediction_made > self.submit else ""),
            f"predicted nodes          {_node_text(self.predicted_nodes)}",
        ]
        if self.advised:
            lines.append(f"advice                   PRE-STAGE: begin at submit + "
                         f"{_duration(self.begin_at - self.submit)}")
        elif not self.can_stage:
            lines.append("advice                   DO NOT PRE-STAGE: the job is predicted to start "
                         "before staging could finish; stage in after allocation")
        elif self.confidence_jobs == 0:
            lines.append("advice                   DO NOT PRE-STAGE: there is time, but no earlier "
                         "job waited that long, so nothing shows how often node lists hold that long")
        elif self.confidence_jobs < MIN_EVIDENCE:
            lines.append(f"advice                   DO NOT PRE-STAGE: there is time, but only "
                         f"{self.confidence_jobs} earlier jobs waited that long: too few to tell "
                         "how often node lists hold that long")
        else:
            lines.append("advice                   DO NOT PRE-STAGE: there is time, but node lists "
                         "are rarely known that early (confidence below the minimum)")
        if not self.can_stage:
            lines.append(f"confidence               none needed: staging ({needed_text} + margin) "
                         f"cannot finish within the predicted wait ({_duration(wait)})")
        elif self.confidence_jobs == 0:
            lines.append(f"confidence               unknown: none of the {self.history_jobs} earlier "
                         f"jobs with a known outcome waited {needed_text} + margin or longer")
        elif self.confidence_jobs < MIN_EVIDENCE:
            kept = round(self.confidence * self.confidence_jobs)
            lines.append(f"confidence               too few jobs to tell: {kept} of the "
                         f"{self.confidence_jobs} earlier jobs that waited at least the staging "
                         f"time kept their predicted node list that long")
        else:
            lines.append(f"confidence               {100 * self.confidence:.0f}% of the "
                         f"{self.confidence_jobs} earlier jobs that waited at least the staging "
                         f"time kept their predicted node list that long")
        lines.append(f"what the simulation did  started at submit + "
                     f"{_duration(self.simulated_start - self.submit)}, node list "
                     f"{'as predicted' if self.simulated_nodes_match else 'DIFFERENT from the prediction'}")
        if np.isfinite(self.real_wait):
            real = f"what really happened     started at submit + {_duration(self.real_wait)} (the trace's wait)"
            if self.real_nodes_match is not None:
                real += (", node list " + ("as predicted" if self.real_nodes_match
                                           else "DIFFERENT from the prediction"))
            lines.append(real)
        else:
            lines.append("what really happened     not recorded (the trace has no wait for this job)")
        return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _node_text(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 8 else f"{', '.join(names[:8])}, ... ({len(names)} nodes)"


def advise(trace: Trace, job_id: int, stage_bytes: float, bandwidth: float,
           walltime: np.ndarray, policy: str = "conservative", margin: float = 0.1,
           depth: int = 100, min_confidence: float = 0.5, estimate: str = "",
           oracle: bool = False) -> Advice:
    """Advice for ``job_id`` (see the module docstring).

    ``margin`` is a fraction of the staging time; pre-staging is advised only when there is
    time for it and the confidence is at least ``min_confidence``. ``estimate`` names how
    ``walltime`` was made and ``oracle`` says that it used the true runtimes (both are shown).
    """
    if stage_bytes < 0 or bandwidth <= 0:
        raise ValueError("--stage-bytes must be >= 0 and --bandwidth > 0")
    matches = np.flatnonzero(trace.jobs["job_id"].to_numpy() == job_id)
    if not len(matches):
        raise ValueError(f"job {job_id} is not in {trace.source}")
    index = int(matches[0])
    stage_seconds = stage_bytes / bandwidth
    needed = stage_seconds * (1 + margin)
    # Only what was submitted up to the job is known when the advice is asked for.
    known = trace.head(index + 1)
    result = simulate(known, walltime[: index + 1], policy, depth=depth, watch=index)
    made_at, predicted_start, predicted_nodes = result.first_prediction
    submit = float(known.jobs["submit"].iloc[index])
    history = result.jobs.iloc[max(0, index - HISTORY_JOBS):index]
    history = history[history["start"] <= submit]     # outcomes already known at submission
    waited = history[history["wait"] >= needed]
    confidence = float((waited["lead"] >= needed).mean()) if len(waited) else float("nan")
    can_stage = predicted_start - submit >= needed
    real_wait = float(trace.jobs["wait"].iloc[index])
    real_match = None
    if trace.node_lists is not None:
        real_match = bool(np.array_equal(np.sort(trace.node_lists[index]), np.sort(predicted_nodes)))
    return Advice(
        job_id=job_id, submit=submit, prediction_made=made_at, stage_seconds=stage_seconds,
        predicted_start=predicted_start,
        predicted_nodes=[known.machine.names[i] for i in predicted_nodes],
        can_stage=bool(can_stage),
        advised=bool(can_stage and len(waited) >= MIN_EVIDENCE and confidence >= min_confidence),
        begin_at=predicted_start - needed if can_stage else None,
        confidence=confidence if can_stage and len(waited) else float("nan"),
        confidence_jobs=len(waited),
        simulated_start=float(result.jobs["start"].iloc[index]),
        simulated_nodes_match=bool(np.array_equal(result.nodes[index], predicted_nodes)),
        history_jobs=len(history), estimate=estimate, oracle=oracle, real_wait=real_wait,
        real_nodes_match=real_match,
        submitted_at=f"{trace.local_time(submit)[0]:%Y-%m-%d %H:%M %Z}",
    )

