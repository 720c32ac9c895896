"""The tuner's one door to Optuna: everything the rest of runner/tune needs, as typed functions and
small classes, so that nothing else imports Optuna or touches one of its objects (tests/test_architecture.py
checks both). Only the modules runner/tune/optuna_*.py import Optuna, each with one job:

    optuna_plan.py     a plan's sampler, pruner and distributions (built and checked)
    optuna_journal.py  the journal file backend that cuts a torn last line before appending
    optuna_storage.py  storages (journal by default, an RDB for a URL), their labels, trials by state
    optuna_study.py    Study: ask, tell by number, report to the pruner, trials; Asked, TrialInfo, State
    optuna_asks.py     an ask process's loop

Used as Optuna's authors intend, by public APIs only: `create_study(load_if_exists=True)`, its samplers
and pruners, `JournalStorage(JournalFileBackend)` for the default local storage, `RDBStorage` for a URL,
ask/tell by trial number, the storage's own methods for reports of a trial asked in another process,
`enqueue_trial` to ask a lost trial's params again.

    storage = open_storage(args.storage, store)          # StudyStorage: Optuna's object and its label
    study = Study.open(plan, storage)                     # created or loaded, checked against the plan
    asked = study.ask()                                   # Asked: number, params
    info = study.tell(asked, values, State.COMPLETE)      # TrialInfo: a plain, frozen view of the trial
"""

from runner.tune.optuna_asks import ASK, READY, serve_asks
from runner.tune.optuna_plan import SEEDS_PER_START, check_plan, grid_size, load_plans
from runner.tune.optuna_storage import JOURNAL_NAME, StudyStorage, open_storage, quiet, storage_label, trial_states
from runner.tune.optuna_study import Asked, AskServer, State, Study, TrialInfo

__all__ = [
    "ASK",
    "JOURNAL_NAME",
    "READY",
    "SEEDS_PER_START",
    "AskServer",
    "Asked",
    "State",
    "Study",
    "StudyStorage",
    "TrialInfo",
    "check_plan",
    "grid_size",
    "load_plans",
    "open_storage",
    "quiet",
    "serve_asks",
    "storage_label",
    "trial_states",
]
