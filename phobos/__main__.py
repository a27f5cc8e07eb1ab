# The command line: `python -m phobos check|compile|cache ...` (also installed as `phobos`).
#
#   check FILE... [--arch sm_90]        every error of every kernel and configuration, and the configurations
#                                       that do not fit the target (shared memory, threads, registers)
#   compile FILE [-D NAME=VALUE]... [--kernel K] [--arch sm_90] [--index-bits 64] [--no-read-only-cache]
#           [--tma] [-o out.ptx]
#           [--dump-ast | --dump-ir | --dump-thread-ir | --dump-schedule | --dump-after=PASS]
#   cache info | cache clear            where the disk cache is, what it holds; empty it
#   emulate FILE.ptx --grid X[,Y,Z] --block X[,Y,Z] [--kernel K] [--shared BYTES] [--cluster X[,Y,Z]]
#           [--arg [NAME=]VALUE]... [--out DIR] [--no-race-checks] [--tensor-cores hopper|ampere]
#                                       run PTX from any producer (nvcc -ptx, Triton, by hand) in the
#                                       emulator; VALUE is FILE.npy, zeros:DTYPE:SHAPE or a number
#   --version
#
# `-D` may set a value the kernel's @autotune list does not have: it is
# compiled as given (as `configure()` does in Python), with a warning naming
# the listed values.  Errors print as `file:line:col: error: message` with the
# source line and a caret; the exit status is 1 when the input has errors, 2
# for bad usage.  A FILE must be a regular file of at most MAX_SOURCE_BYTES
# (a FIFO, a device or a directory is refused before anything is read, so
# /dev/zero cannot fill memory and a FIFO without a writer cannot block), and
# `-o` must name a file in an existing directory, never the source itself.
from __future__ import annotations

import argparse
import os
import stat
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import cli
from .compiler import (INDEX_WIDTHS, PASS_NAMES, TARGETS, Dumps, compile_kernel, parse_source, pick_kernel,
                       unfit_configurations)
from .errors import Note, PhobosError, ResourceError
from .frontend.sema import autotune_space, check_program


#: The largest source file read (the largest kernels are a few hundred kilobytes).
MAX_SOURCE_BYTES = 16 * 1024 * 1024

_FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def _read(path: str) -> str:
    """The text of source file `path`; a usage error (exit 2) for anything but a regular UTF-8 file of at
    most MAX_SOURCE_BYTES.  Opened without blocking and looked at before a byte is read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as err:
        raise SystemExit(_usage_error(f"cannot read {path}: {err.strerror}"))
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        kind = _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise SystemExit(_usage_error(f"cannot read {path}: it is {kind}, not a source file"))
    with os.fdopen(descriptor, "rb") as f:
        try:
            data = f.read(MAX_SOURCE_BYTES + 1)
        except OSError as err:
            raise SystemExit(_usage_error(f"cannot read {path}: {err.strerror}"))
    if len(data) > MAX_SOURCE_BYTES:
        raise SystemExit(_usage_error(f"{path} is larger than {MAX_SOURCE_BYTES >> 20} MiB: not a Phobos source"))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SystemExit(_usage_error(f"{path} is not UTF-8 text"))


def _output_problem(output: str, source: str) -> str | None:
    """Why the PTX cannot be written to `output`, found before compiling, or None."""
    target = os.path.abspath(output)
    if os.path.isdir(target):
        return f"-o {output} is a directory; name the file to write"
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        return f"-o {output}: the directory {folder} does not exist"
    if os.path.exists(target) and os.path.exists(source) and os.path.samefile(target, source):
        return f"-o {output} is the source file {source}; it would be overwritten with PTX"
    return None


def _usage_error(message: str) -> int:
    print(f"phobos: error: {message}", file=sys.stderr)
    return 2


def _warning(message: str) -> None:
    print(f"phobos: warning: {message}", file=sys.stderr)


def cmd_check(args) -> int:
    failed = False
    for path in args.files:
        src = _read(path)
        warnings: list[PhobosError] = []
        try:
            program = parse_source(src, path)
            errors = check_program(program)
            if not errors:
                errors, warnings = _resource_problems(program, args.arch)
        except PhobosError as err:
            errors = [err]
        for err in errors:
            print(err.diagnostic(), file=sys.stderr)
        for warning in warnings:
            print(warning.diagnostic("warning"), file=sys.stderr)
        failed |= bool(errors)
        if not errors and not args.quiet:
            print(f"{path}: ok")
    return 1 if failed else 0


def _resource_problems(program, arch: str) -> tuple[list[PhobosError], list[PhobosError]]:
    """Errors for the kernels no configuration of which fits `arch`, warnings for those some of whose do not
    (the autotuner skips those): one configuration's own ResourceError, or one that lists them."""
    errors: list[PhobosError] = []
    warnings: list[PhobosError] = []
    for name, (count, unfit) in unfit_configurations(program, arch).items():
        if not unfit:
            continue
        fits = count - len(unfit)
        skipped = f"the autotuner skips {'it' if len(unfit) == 1 else 'them'}; {fits} of the {count} fit"
        if len(unfit) == 1:
            error = unfit[0][1]
            if fits:
                error.notes.append(Note(skipped))
        else:
            head = unfit[0][1]
            error = ResourceError(
                f"{'none' if not fits else len(unfit)} of the {count} configurations of kernel '{name}' "
                f"{'fits' if not fits else 'do not fit'} {arch}", head.loc,
                [Note(f"{text}: {e.message}" + (f" (at {e.loc})" if e.loc != head.loc else "")) for text, e in unfit]
                + ([Note(skipped)] if fits else []))
        (warnings if fits else errors).append(error)
    return errors, warnings


def _define(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got '{text}'")
    try:
        return name, int(value, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the value of {name} must be an integer, got '{value}'") from None


def cmd_compile(args) -> int:
    src = _read(args.file)
    problem = _output_problem(args.output, args.file) if args.output else None
    if problem is not None:
        return _usage_error(problem)
    after = args.dump_after
    if after is not None and after.split(":")[-1] not in PASS_NAMES:
        return _usage_error(f"unknown pass '{after}'; passes: {', '.join(PASS_NAMES)}")
    dumps = Dumps(ast=args.dump_ast, ir=args.dump_ir, after=after, thread_ir=args.dump_thread_ir,
                  schedule=args.dump_schedule)
    config = dict(args.define)
    try:
        node = pick_kernel(parse_source(src, args.file), args.kernel)
        space = autotune_space(node)
        for name, value in config.items():
            if name in space and value not in space[name]:
                _warning(f"{name}={value} is not among the values @autotune lists for kernel '{node.name}' "
                         f"({', '.join(map(str, space[name]))}); compiling with {name}={value} as given")
        kernel = compile_kernel(node, arch=args.arch, config=config or None, dumps=dumps,
                                index_bits=args.index_bits, read_only_cache=args.read_only_cache, tma=args.tma)
    except PhobosError as err:
        print(err.diagnostic(), file=sys.stderr)
        return 1
    if dumps.texts:
        print("\n\n".join(dumps.texts))
        if not args.output:
            return 0
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(kernel.ptx)
        except OSError as err:
            return _usage_error(f"cannot write {args.output}: {err.strerror}")
    elif not dumps.texts:
        sys.stdout.write(kernel.ptx)
    return 0


def cmd_cache(args) -> int:
    from .launch import cache
    store = cache.default_cache()
    if args.action == "info":
        print(store.info().summary())
        return 0
    try:
        print(f"cache: {store.root}: {cache.entries_text(store.clear())} deleted")
    except PhobosError as err:
        return _usage_error(err.message)
    return 0


#: Element types of `zeros:DTYPE:SHAPE` arguments: PTX's names, and numpy's for the rest.
_PTX_DTYPES = {"f16": "float16", "f32": "float32", "f64": "float64", "s8": "int8", "s16": "int16", "s32": "int32",
               "s64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "b8": "uint8",
               "b16": "uint16", "b32": "uint32", "b64": "uint64"}


@dataclass
class EmulatorArgument:
    """One `--arg`: the parameter it names (None: the next one in order), its value (an array or a number),
    and where an array the kernel writes is saved (None: a number)."""

    name: str | None
    value: Any
    save_as: str | None


def _sizes(text: str, what: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be 1 to 3 positive integers separated by commas, "
                                         f"got '{text}'") from None
    if not 1 <= len(sizes) <= 3 or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{what} must be 1 to 3 positive integers separated by commas, got '{text}'")
    return sizes


def _argument_value(text: str, param: str, ptx_type: str, out: str | None) -> EmulatorArgument | str:
    """The value `text` gives parameter `param` of PTX type `ptx_type`, or why it cannot."""
    if ptx_type == "bytes":
        return f"parameter {param} is a byte array (a tensor map?), which the command line cannot give"
    if text.startswith("zeros:"):
        parts = text.split(":")
        if len(parts) != 3:
            return f"{param}={text}: expected zeros:DTYPE:SHAPE (zeros:f32:1024, zeros:s32:64x64)"
        try:
            dtype = np.dtype(_PTX_DTYPES.get(parts[1], parts[1]))
            shape = tuple(int(size) for size in parts[2].split("x"))
        except (TypeError, ValueError):
            return f"{param}={text}: expected zeros:DTYPE:SHAPE with a numpy or PTX element type and sizes like 64x64"
        return EmulatorArgument(param, np.zeros(shape, dtype), os.path.join(out or ".", f"{param}.npy"))
    if text.endswith(".npy"):
        try:
            array = np.load(text, allow_pickle=False)
        except (OSError, ValueError) as err:
            return f"{param}={text}: cannot read it: {getattr(err, 'strerror', None) or err}"
        return EmulatorArgument(param, array, os.path.join(out, os.path.basename(text)) if out else text)
    try:
        number = float(text) if ptx_type.startswith("f") else int(text, 0)
    except ValueError:
        kind = "a number" if ptx_type.startswith("f") else "an integer"
        return f"{param}={text}: .{ptx_type} takes {kind}, a FILE.npy or zeros:DTYPE:SHAPE"
    return EmulatorArgument(param, number, None)


def _bind_arguments(texts: list[str], params: list[tuple[str, str]], out: str | None) -> list[EmulatorArgument] | str:
    """The `--arg` values in parameter order, or why they do not fit the parameters."""
    names = [name for name, _ in params]
    given: dict[str, str] = {}
    positional = []
    for text in texts:
        name, sep, value = text.partition("=")
        if sep and name in names:
            if name in given:
                return f"parameter {name} is given twice"
            given[name] = value
        elif sep and name.isidentifier() and not name.endswith(".npy"):
            return f"the kernel has no parameter {name!r} (its parameters: {', '.join(names)})"
        else:
            positional.append(text)
    free = [name for name in names if name not in given]
    if len(positional) > len(free):
        return f"{len(texts)} arguments for {len(names)} parameters ({', '.join(names)})"
    given.update(zip(free, positional))
    missing = [name for name in names if name not in given]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        return f"no value{plural} for parameter{plural} {', '.join(missing)} (--arg NAME=VALUE)"
    arguments = []
    for name, ptx_type in params:
        argument = _argument_value(given[name], name, ptx_type, out)
        if isinstance(argument, str):
            return argument
        arguments.append(argument)
    return arguments


def cmd_emulate(args) -> int:
    from .run import emulator
    text = _read(args.file)
    if args.out and not os.path.isdir(args.out):
        return _usage_error(f"--out {args.out} is not a directory")
    try:
        module = emulator.load_module(text, args.file)
    except PhobosError as err:
        print(err.diagnostic(), file=sys.stderr)
        return 1
    names = list(module.kernels)
    if args.kernel is None and len(names) != 1:
        return _usage_error(f"{args.file} has {len(names)} kernels; name one with --kernel ({', '.join(names)})")
    name = args.kernel or names[0]
    if name not in module.kernels:
        return _usage_error(f"{args.file} has no kernel {name!r} (it has {', '.join(names) or 'none'})")
    kernel = module.kernels[name]
    arguments = _bind_arguments(args.arg, kernel.params, args.out)
    if isinstance(arguments, str):
        return _usage_error(f"{name}: {arguments}")
    module.register_sources(os.path.dirname(os.path.abspath(args.file)))
    before = [np.copy(a.value) if a.save_as else None for a in arguments]
    try:
        stats = kernel.launch(args.grid, args.block, [a.value for a in arguments], args.shared,
                              check_races=args.race_checks, tensor_cores=args.tensor_cores, cluster=args.cluster)
    except PhobosError as err:
        print(err.diagnostic(), file=sys.stderr)
        return 1
    print(f"{name}: {stats.threads} threads ({stats.grid} x {stats.block}), {stats.steps} instruction steps, "
          f"{stats.seconds:.2f} s", file=sys.stderr)
    for argument, old in zip(arguments, before):
        if argument.save_as and not np.array_equal(old, argument.value):
            np.save(argument.save_as, argument.value)
            print(f"wrote {argument.name} to {argument.save_as}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m phobos", description="The Phobos tile kernel compiler.")
    parser.add_argument("--version", action="version", version=cli.VERSION_TEXT)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="report every error in Phobos source files")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("-q", "--quiet", action="store_true", help="print nothing for files without errors")
    check.add_argument("--arch", default="sm_90", choices=sorted(TARGETS),
                       help="the target whose limits the configurations must fit (shared memory, threads and "
                            "registers per CTA)")
    comp = sub.add_parser("compile", help="compile one kernel configuration to PTX")
    comp.add_argument("file", metavar="FILE")
    comp.add_argument("-D", dest="define", action="append", type=_define, default=[], metavar="NAME=VALUE",
                      help="set an autotune parameter (default: its first value); a value @autotune does not "
                           "list is compiled as given, with a warning")
    comp.add_argument("--kernel", help="which kernel, when the file has several")
    comp.add_argument("--arch", default="sm_90", choices=sorted(TARGETS))
    comp.add_argument("--index-bits", type=int, default=32, choices=INDEX_WIDTHS,
                      help="width of tensor dims and element indices (64: dims of 2^31 or more)")
    comp.add_argument("--no-read-only-cache", dest="read_only_cache", action="store_false",
                      help="load no tensor with ld.global.nc (the code for calls whose tensors overlap)")
    comp.add_argument("--tma", action="store_true",
                      help="let K loops copy by TMA (sm_90a; the kernel then takes tensor map parameters, which "
                           "the launcher builds per call)")
    comp.add_argument("-o", "--output", metavar="OUT.ptx", help="write the PTX here (default: stdout)")
    comp.add_argument("--dump-ast", action="store_true", help="print the AST")
    comp.add_argument("--dump-ir", action="store_true", help="print the tile-level IR before the passes")
    comp.add_argument("--dump-thread-ir", action="store_true", help="print the thread-level IR after lowering")
    comp.add_argument("--dump-schedule", action="store_true",
                      help="print each pipelined K loop's schedule: who copies, who multiplies, what each waits "
                           "on, the tile order (--dump-ir prints it too)")
    comp.add_argument("--dump-after", metavar="PASS",
                      help=f"print the IR after a pass ({', '.join(PASS_NAMES)}; 'tile:' or 'thread:' "
                           f"picks the level)")
    store = sub.add_parser("cache", help="show where the disk cache is and what it holds, or empty it")
    store.add_argument("action", choices=["info", "clear"])
    emulate = sub.add_parser("emulate", help="run a PTX kernel (from nvcc -ptx, Triton, by hand...) in the emulator",
                             description="Run one kernel of a PTX file in the emulator, with every check of "
                                         "docs/emulator.md. Arguments are the kernel's parameters in order, or "
                                         "NAME=VALUE: FILE.npy (an array, written back if the kernel changes "
                                         "it), zeros:DTYPE:SHAPE (a new array, saved as NAME.npy), or a number.")
    emulate.add_argument("file", metavar="FILE.ptx")
    emulate.add_argument("--kernel", help="which .entry, when the file has several")
    emulate.add_argument("--grid", required=True, type=lambda t: _sizes(t, "--grid"), metavar="X[,Y,Z]")
    emulate.add_argument("--block", required=True, type=lambda t: _sizes(t, "--block"), metavar="X[,Y,Z]")
    emulate.add_argument("--cluster", type=lambda t: _sizes(t, "--cluster"), metavar="X[,Y,Z]",
                         help="thread-block cluster shape (default: the kernel's .reqnctapercluster, else 1)")
    emulate.add_argument("--shared", type=int, default=0, metavar="BYTES", help="dynamic shared memory")
    emulate.add_argument("--arg", action="append", default=[], metavar="[NAME=]VALUE",
                         help="one parameter's value: FILE.npy, zeros:DTYPE:SHAPE (zeros:f32:1024) or a number")
    emulate.add_argument("--out", metavar="DIR", help="save the arrays the kernel writes here (default: over their "
                                                      ".npy files; zeros: arrays in the current directory)")
    emulate.add_argument("--no-race-checks", dest="race_checks", action="store_false",
                         help="turn off the race detectors (faster)")
    emulate.add_argument("--tensor-cores", default="hopper", choices=["hopper", "ampere"],
                         help="the numeric model of mma and wgmma (docs/tensor_cores.md)")
    args = parser.parse_args(argv)
    if args.command == "emulate" and args.shared < 0:
        parser.error("--shared must be a non-negative number of bytes")
    return {"check": cmd_check, "compile": cmd_compile, "cache": cmd_cache,
            "emulate": cmd_emulate}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
