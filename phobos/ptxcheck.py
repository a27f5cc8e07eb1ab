# Checking PTX with ptxas: does it assemble, and what does each kernel cost?
#
# `check(ptx_text, arch)` runs `ptxas -v` (through phobos.toolchain) and turns
# its output into a `Report` (`assemble` keeps the cubin too): per kernel the registers, spill stores and loads,
# shared memory and stack frame, plus ptxas's errors and warnings with the line
# of the PTX they point at.  The compiler uses it to vet what it emits; tests
# use it to pin resource usage.
#
# As a command, `python -m phobos.ptxcheck FILE... [--arch sm_75,sm_90] [--json]`
# checks every file for every target.  Without --arch, a .ptx file is checked
# for the target its `.target` names and the default targets that take it
# (`targets_for`), and the command says so when that is not the defaults; a
# text ptxas refuses for a target that cannot take its `.target` gets a note
# naming the --arch that would (`target_note`).  Each input path becomes a list of
# `CheckUnit`s (a label and a PTX text) in `_units_for`: a .ptx file is one
# unit; a .phobos file gives one unit per kernel and autotune configuration,
# which also carries the dynamic shared memory the compiler gives the kernel
# at launch (ptxas sees only static shared memory, which Phobos does not use).
# Long runs log progress lines (phobos.log) on stderr.
#
# Exit status: 0 when everything assembles, 1 when ptxas rejects something,
# 2 when the check could not run (a missing file, an unknown target, no ptxas).
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from . import cli
from .errors import PhobosError, PtxasError, ToolchainError
from .log import Progress
from .toolchain import check_arch, find_ptxas, run_ptxas

DEFAULT_ARCHS = ("sm_75", "sm_90")

logger = logging.getLogger("phobos.ptxcheck")  # not __name__, which is "__main__" when run with -m


@dataclass
class KernelReport:
    """What ptxas reports for one kernel (.entry) on one target; sizes in bytes."""

    name: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared_bytes: int = 0  # static shared memory, as ptxas reports it
    stack_bytes: int = 0
    # Dynamic shared memory given at launch, which ptxas cannot see: known for
    # kernels compiled from Phobos source (CompiledKernel.shared_bytes), else None.
    dynamic_shared_bytes: int | None = None
    # ptxas's "Potential Performance Loss" notes, e.g. "C7511: wgmma.mma_async instructions are serialized ..."
    advisories: list[str] = field(default_factory=list)

    def summary(self) -> str:
        dynamic = "" if self.dynamic_shared_bytes is None else f" + {self.dynamic_shared_bytes} B dynamic shared"
        return (
            f"{self.name}: {self.registers} registers, {self.spill_stores} B spill stores, "
            f"{self.spill_loads} B spill loads, {self.shared_bytes} B shared{dynamic}, {self.stack_bytes} B stack"
            + "".join(f"; {advisory}" for advisory in self.advisories)
        )


@dataclass
class PtxasDiagnostic:
    """An error or warning from ptxas; `line` is the PTX line, None when ptxas gives none."""

    file: str
    line: int | None
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.severity}: {self.message}"


@dataclass
class Report:
    """The outcome of assembling one PTX text for one target."""

    arch: str
    name: str
    ok: bool
    kernels: list[KernelReport] = field(default_factory=list)
    errors: list[PtxasDiagnostic] = field(default_factory=list)
    warnings: list[PtxasDiagnostic] = field(default_factory=list)
    raw: str = ""

    def kernel(self, name: str) -> KernelReport:
        """The report of the kernel called `name`; KeyError if there is none."""
        for kernel in self.kernels:
            if kernel.name == name:
                return kernel
        raise KeyError(f"no kernel '{name}' in {self.name} (kernels: {', '.join(k.name for k in self.kernels)})")

    def raise_for_errors(self) -> None:
        """Raise PtxasError listing ptxas's errors if the text did not assemble."""
        if self.ok:
            return
        details = "\n".join(f"  {error}" for error in self.errors)
        raise PtxasError(f"ptxas rejected {self.name} for {self.arch}:\n{details}")


def check(ptx_text: str, arch: str | None = None, name: str = "<ptx>", timeout: float | None = None) -> Report:
    """Assemble `ptx_text` for `arch` (default: the target its `.target` names, else sm_90) and report
    per-kernel resources and diagnostics.

    `name` is the file name diagnostics and the report are labelled with.
    Raises ToolchainError for an unknown target or when ptxas cannot be found,
    PtxasTimeout when ptxas takes longer than `timeout` seconds.
    """
    arch = arch or declared_target(ptx_text) or "sm_90"
    return _report(arch, name, *run_ptxas(ptx_text, arch, source_name=name, timeout=timeout))


_TARGET = re.compile(r"^\s*\.target\s+(sm_\w+)", re.MULTILINE)


def declared_target(ptx_text: str) -> str | None:
    """The target a PTX text's `.target` directive names (sm_80, sm_90a), or None when it has none."""
    match = _TARGET.search(ptx_text)
    return match[1] if match else None


def targets_for(ptx_target: str | None) -> list[str]:
    """The targets to check a PTX text for when none is asked for: the default targets that take its
    `.target` (phobos.compiler.Target.takes), and that target itself when Phobos knows it."""
    from .compiler import TARGETS
    if ptx_target is None:
        return list(DEFAULT_ARCHS)
    return [arch for arch, target in TARGETS.items()
            if arch == ptx_target or (arch in DEFAULT_ARCHS and target.takes(ptx_target))] or list(DEFAULT_ARCHS)


def target_note(ptx_target: str | None, arch: str) -> str | None:
    """Why ptxas may have refused a text for `arch`: its `.target` needs another target; which would take it."""
    from .compiler import TARGETS
    if ptx_target is None or arch not in TARGETS or TARGETS[arch].takes(ptx_target):
        return None
    takers = [name for name, target in TARGETS.items() if target.takes(ptx_target)]
    if not takers:
        return f"note: its .target is {ptx_target}, which no target of Phobos takes"
    return f"note: its .target is {ptx_target}, which {arch} cannot take: --arch {takers[0]} would" + (
        f" (or {', '.join(takers[1:])})" if len(takers) > 1 else "")


def assemble(ptx_text: str, arch: str = "sm_90", name: str = "<ptx>",
             timeout: float | None = None) -> tuple[Report, bytes | None]:
    """`check`, keeping what ptxas made: the report and the cubin (None when ptxas rejected the text).

    The driver loads that cubin as it is, instead of compiling the PTX again.
    """
    with tempfile.TemporaryDirectory(prefix="phobos-cubin-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        report = _report(arch, name, *run_ptxas(ptx_text, arch, source_name=name, timeout=timeout, cubin_path=path))
        cubin = path.read_bytes() if report.ok and path.exists() else None
    return report, cubin


def _report(arch: str, name: str, returncode: int, stdout: str, stderr: str) -> Report:
    raw = stdout + stderr
    kernels, errors, warnings = _parse_ptxas_output(raw, name)
    if returncode != 0 and not errors:
        errors.append(PtxasDiagnostic(name, None, f"ptxas exited with status {returncode}"))
    return Report(arch, name, returncode == 0, kernels, errors, warnings, raw)


# ptxas -v output, e.g.
#   ptxas info    : Compiling entry function 'add' for 'sm_90'
#   ptxas info    : Function properties for add
#       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 12 registers, used 0 barriers, 4096 bytes smem, 380 bytes cmem[0]
#   ptxas add.ptx, line 7; error   : Not a name of any known instruction: 'bogus'
#   ptxas add.ptx, line 3; fatal   : Parsing error near 'bogus': syntax error
#   ptxas warning : For entry k adjusting per thread register count of 4 to lower bound of 24
#   ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to
#                   insufficient register resources for the wgmma pipeline in the function 'k'   (one line)
#   ptxas fatal   : Ptx assembly aborted due to errors
_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_USED_REGISTERS = re.compile(r"Used (?P<registers>\d+) registers")
_SHARED = re.compile(r"(?P<shared>\d+) bytes smem")
_LOCATED = re.compile(r"^ptxas .*, line (?P<line>\d+); (?P<severity>error|warning|fatal)\s*: (?P<message>.*)$")
_UNLOCATED = re.compile(r"^ptxas (?P<severity>error|warning|fatal)\s*: (?P<message>.*)$")
_ABORTED = "Ptx assembly aborted due to errors"
_ADVISORY = re.compile(r"^ptxas info\s*: \((?P<code>C\d+)\) Potential Performance Loss: (?P<message>.*?)"
                       r" in the function '(?P<name>[^']+)'")


def _parse_ptxas_output(
    output: str, name: str
) -> tuple[list[KernelReport], list[PtxasDiagnostic], list[PtxasDiagnostic]]:
    """Split ptxas -v output into kernel reports, errors and warnings."""
    kernels: dict[str, KernelReport] = {}
    errors: list[PtxasDiagnostic] = []
    warnings: list[PtxasDiagnostic] = []
    described: KernelReport | None = None  # the kernel the next resource lines are about
    advisories: dict[str, list[str]] = {}  # by kernel: they come before its entry's lines
    for line in output.splitlines():
        if match := _ADVISORY.match(line):
            advisories.setdefault(match["name"], []).append(f"{match['code']}: {match['message']}")
        elif match := _LOCATED.match(line) or _UNLOCATED.match(line):
            message = match["message"].strip()
            if message == _ABORTED and errors:
                continue  # says nothing the errors above do not
            severity = "warning" if match["severity"] == "warning" else "error"
            line_number = int(match["line"]) if "line" in match.groupdict() else None
            diagnostic = PtxasDiagnostic(name, line_number, message, severity)
            (errors if severity == "error" else warnings).append(diagnostic)
        elif match := _ENTRY.search(line):
            kernels[match["name"]] = KernelReport(match["name"])
        elif match := _PROPERTIES.search(line):
            described = kernels.get(match["name"])  # None for .func device functions
        elif described is not None and (match := _FRAME.search(line)):
            described.stack_bytes = int(match["stack"])
            described.spill_stores = int(match["stores"])
            described.spill_loads = int(match["loads"])
        elif described is not None and (match := _USED_REGISTERS.search(line)):
            described.registers = int(match["registers"])
            if shared := _SHARED.search(line):
                described.shared_bytes = int(shared["shared"])
    for kernel in kernels.values():
        kernel.advisories = advisories.get(kernel.name, [])
    return list(kernels.values()), errors, warnings


class CheckUnit(NamedTuple):
    """One PTX text to check, with the label its results are printed under (no text: skipped).

    For a kernel compiled from Phobos source, `kernel` names it and
    `dynamic_shared_bytes` is the dynamic shared memory it is launched with.
    """

    label: str
    ptx: str | None
    kernel: str | None = None
    dynamic_shared_bytes: int | None = None

    @property
    def target(self) -> str | None:
        """The target the text's `.target` names."""
        return declared_target(self.ptx) if self.ptx is not None else None

    def check(self, arch: str) -> Report:
        """ptxas's report on the text, with the dynamic shared memory filled in."""
        report = check(self.ptx, arch, self.label)
        for kernel in report.kernels:
            if kernel.name == self.kernel:
                kernel.dynamic_shared_bytes = self.dynamic_shared_bytes
        return report


class InputError(PhobosError):
    """An input path the checker cannot read or does not know how to check."""


def _units_for(path: str, arch: str) -> list[CheckUnit]:
    """The PTX texts to check for the input file `path` on target `arch`."""
    file = Path(path)
    if not file.exists():
        raise InputError(f"{path}: no such file")
    if not file.is_file():
        raise InputError(f"{path}: not a file")
    if file.suffix not in (".ptx", ".phobos"):
        raise InputError(f"{path}: unsupported file type '{file.suffix}' (expected .ptx or .phobos)")
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from error
    if file.suffix == ".ptx":
        return [CheckUnit(path, text)]
    from .compiler import compile_all  # every kernel, every autotune configuration
    units = []
    for k in compile_all(text, arch=arch, filename=path):
        if isinstance(k, PhobosError):  # the configuration does not fit this target: nothing to assemble
            units.append(CheckUnit(f"{path} [{arch}] skipped: {k.message}; {k.notes[-1].message}", None))
        else:
            units.append(CheckUnit(f"{path} [{k.kernel_name}: {k.config_text}]", k.ptx, k.kernel_name,
                                   k.shared_bytes))
    return units


def _parse_archs(text: str | None) -> list[str] | None:
    """The targets --arch names; None when it names none (each file then gets its own: `_archs_for`)."""
    if text is None:
        return None
    return [check_arch(arch.strip()) for arch in text.split(",") if arch.strip()] or list(DEFAULT_ARCHS)


def _archs_for(path: str, asked: list[str] | None) -> list[str]:
    """The targets to check `path` for: those asked for; for a .ptx file, `targets_for` its `.target` (said on
    stderr when that differs from the defaults); else the defaults."""
    if asked is not None:
        return asked
    if not path.endswith(".ptx"):
        return list(DEFAULT_ARCHS)
    try:
        declared = declared_target(Path(path).read_text())
    except (OSError, UnicodeDecodeError):
        return list(DEFAULT_ARCHS)  # _units_for says what is wrong with it
    archs = targets_for(declared)
    if archs != list(DEFAULT_ARCHS):
        print(f"ptxcheck: {path} has .target {declared}: checking it for {', '.join(archs)} "
              f"(--arch chooses the targets)", file=sys.stderr)
    return archs


def _print_human(report: Report, unit: CheckUnit) -> None:
    for warning in report.warnings:
        print(warning)
    if report.ok:
        for kernel in report.kernels:
            print(f"{report.name} [{report.arch}] {kernel.summary()}")
    else:
        print(f"{report.name} [{report.arch}]: rejected by ptxas")
        for error in report.errors:
            print(error)
        note = target_note(unit.target, report.arch)
        if note is not None:
            print(f"{report.name}: {note}")


def main(argv: list[str] | None = None) -> int:
    """Run the checker as a command; return its exit status."""
    return cli.run(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m phobos.ptxcheck",
        description="Assemble PTX with ptxas and report registers, spills, shared memory and stack per kernel.",
    )
    parser.add_argument("--version", action="version", version=cli.VERSION_TEXT)
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="PTX files, or Phobos sources (every kernel and configuration is compiled)")
    parser.add_argument(
        "--arch",
        help=f"comma-separated targets (default: {','.join(DEFAULT_ARCHS)}; for a .ptx file, the target its .target "
             f"names and those of the defaults that take it)",
    )
    parser.add_argument("--json", action="store_true", help="print the reports as a JSON list")
    args = parser.parse_args(argv)

    try:
        archs = _parse_archs(args.arch)
        find_ptxas()
        work = [(arch, unit) for path in args.files for arch in _archs_for(path, archs)
                for unit in _units_for(path, arch)]
    except (InputError, ToolchainError) as error:
        print(f"ptxcheck: {error.message}", file=sys.stderr)
        return 2
    except PhobosError as error:  # a .phobos source that does not compile
        print(error.diagnostic(), file=sys.stderr)
        return 1

    for _, unit in work:
        if unit.ptx is None:
            print(unit.label)
    todo = [(arch, unit) for arch, unit in work if unit.ptx is not None]
    progress = Progress(logger, f"assembling {len(todo)} PTX texts with ptxas", len(todo), "texts")
    reports = []
    for arch, unit in todo:
        reports.append(unit.check(arch))
        progress.update(len(reports))
    progress.finish(f"{sum(report.ok for report in reports)} of {len(reports)} assembled")
    if args.json:
        print(json.dumps([dataclasses.asdict(report) for report in reports], indent=2))
    else:
        for report, (_, unit) in zip(reports, todo):
            _print_human(report, unit)
    return 0 if all(report.ok for report in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
