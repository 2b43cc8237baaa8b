"""Which configs a server serves on this host: the host profile `tmr tune` wrote when it
still fits this host, the reviewed configs when there is none or the operator asks, and
never a profile tuned on another host or from other reviewed configs. Operations since the
tuning (a rollout, promote, rollback, export or an added model) do not stop it: it keeps
serving and says what changed (core/tune_record.py `changed_since`)."""

from __future__ import annotations

import functools
from pathlib import Path

from core import host_profile as hp
from core import tune_record as tr
from core.paths import DEFAULT_REPOSITORY
from core.variant import HOST, REVIEWED, VARIANT_ENV, Variant

RETUNE = "run `tmr tune` (about 3 min on 2 cores) or serve the reviewed configs with " \
         "`tmr serve --reviewed`"


def status(repository: Path) -> tuple[bool, str]:
    """(whether the written profile fits this host and repository, why in one line); an
    unreadable record does not fit (`tmr tune --if-stale` tunes again)."""
    try:
        record = tr.read_record(repository)
    except hp.ProfileError as err:
        return False, str(err)
    if record is None:
        return False, "no host profile here: `tmr tune` has not run"
    reasons = tr.unfit_reasons(record, hp.Host.current(), repository)
    gone = [f for f in record.profiled
            if not (repository / f / "configs" / f"{HOST.name}.pbtxt").exists()]
    if gone:
        reasons.append(f"its configs/{HOST.name}.pbtxt is gone from {', '.join(gone)}")
    if reasons:
        return False, "the host profile is stale: " + "; ".join(reasons)
    tuned = f"tuned {record.written_at} on this host ({record.host.model}, " \
            f"{record.host.cores} cores)"
    if changed := tr.changed_since(record, repository):
        tuned += f"; since then {'; '.join(changed)} (their choices stand until `tmr tune` " \
                 "measures them again)"
    return True, tuned



def choices(record: tr.TuneRecord) -> str:
    """Each front's choice in one line: what serves and why."""
    return "\n".join(f"  {front}: {c.reason}" for front, c in record.fronts.items())


def verdicts(record: tr.TuneRecord) -> str:
    """What the tuning concluded, its fronts' verdicts in one phrase (core.host_profile
    Verdict)."""
    said = dict.fromkeys(c.verdict.value for c in record.fronts.values())
    return "; ".join(said) or hp.Verdict.NO_ROUNDS.value


def select(repository: Path, reviewed: bool = False,
           asked: Variant | None = None) -> tuple[Variant, str]:
    """(the variant to serve, a line saying which configs serve and why): `asked` when
    given (`--model-config-name`), the reviewed configs with `reviewed`, else the host
    profile where it fits. ProfileError for a stale profile: it is never served silently,
    nor silently dropped."""
    if asked is not None and not asked.reviewed:
        return asked, f"serving {asked.describe()} (--model-config-name)"
    if reviewed:
        return REVIEWED, "serving the reviewed configs (--reviewed)"
    fits, why = status(repository)
    record = tr.read_record(repository) if fits else None
    if not fits and (repository / tr.RECORD_FILE).exists():
        raise hp.ProfileError(f"{why}\n{RETUNE}")
    if record is None:
        return REVIEWED, (f"serving the reviewed configs: {why} (`tmr tune` fits them to "
                          "this host)")
    if not record.profiled:
        return REVIEWED, f"serving the reviewed configs: `tmr tune` {verdicts(record)} " \
                         f"({why})\n{choices(record)}"
    return HOST, f"serving the host profile ({why})\n{choices(record)}"


@functools.cache
def served_variant(repository: Path = DEFAULT_REPOSITORY) -> tuple[Variant, str]:
    """What `tmr serve` serves from `repository` on this host (select over it): (its
    variant, the line saying why), read once per process and repository. The release
    commands act on it, every benchmark and `tmr perf plan --check` measure it, and a copy
    of the repository carries its configs/host.pbtxt. Where $TMR_CONFIG_NAME is set (the
    test suite sets it empty: the reviewed configs), that variant instead."""
    pinned = Variant.from_environment()
    if pinned is not None:
        return pinned, f"serving {pinned.describe()} (${VARIANT_ENV})"
    return select(repository)


def describe(repository: Path) -> str:
    """`tmr tune --show`: what serves on this host, why, and the last tuning's report."""
    try:
        _, line = select(repository)
    except hp.ProfileError as err:
        line = str(err)
    report = repository / tr.REPORT_FILE
    text = report.read_text() if report.exists() else ""
    return f"{line}\n\n{text}".rstrip()
