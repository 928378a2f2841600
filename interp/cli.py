"""The ``interp`` command. Bad input prints one clear line and exits 2, never a traceback.

Bad input is exactly what the project's checks raise, :class:`~interp._checks.InvalidInput` (and its subclass
``InvalidInputType``), a ``FileNotFoundError`` for a missing checkpoint or input path, and an ``OSError`` for an
output path that cannot be written. Every other exception is an internal error and keeps its traceback (exit 1).
``interp verify`` exits 1 when a check fails; Ctrl-C prints one line and exits 130.

Start-up: building the parser and checking ``train``'s options import no torch (``interp``'s public names, the
configs and ``interp._checks`` are torch-free until used), so ``interp --help`` and a rejected option answer at once;
each command imports what it needs when it runs.

Every command checks, before any work, in this order: its option values; that no output is one of its inputs
(``check_outputs_spare_inputs``: resolved links, same inode); that every output can be written, in a folder that
exists (``check_output_file`` / ``check_output_folder``: nothing but an ``evaluate`` folder's last level is
created; a FIFO, socket, block device or folder where a file must be is refused without being opened, ``report
--out /dev/null`` writes straight into the device and ``train --out`` takes a regular file or a new name only);
and, once the sizes are known, that the memory the work needs is available (``memory_needs`` of
``TrainConfig`` and ``EvalConfig`` against ``available_memory``). ``--device`` (train, evaluate, report; default
cpu) is checked first among the values that need torch (``check_device``): an unknown device, or CUDA/MPS on a
machine without it, is refused naming ``--device``.

Ctrl-C holds from the very start. Run as a program (the ``interp`` console script or ``python -m interp.cli``), this
module's first statements install a SIGINT handler, before anything else is imported: while the command starts
(imports, parsing) and whenever the interrupt lands inside an import (torch, numpy, scikit-learn and plotly are
imported while a command runs), it prints the command's one line and exits 130 at once, since a KeyboardInterrupt
raised inside an import leaves half-initialised modules behind (a later RecursionError in numpy, a traceback). Any
other moment of the command raises KeyboardInterrupt as usual, so the writers remove their temporary files and
training keeps its checkpoint, and ``interp._arguments.run`` prints the same one line. Only the interpreter's own
start-up and the package's two-line ``interp/__init__`` that Python runs first (some tens of milliseconds) are
outside it.
"""

from __future__ import annotations

import _signal  # the C module behind ``signal``, built in: the handler below is in place in microseconds
import os
import sys


# ----- Ctrl-C from the very start (first, before the other imports) --------------------------------------------
class _Interrupts:
    """What a Ctrl-C prints while the command runs (``line``) and whether ``run`` is handling it (``handled``)."""

    line = staticmethod(lambda: "interp: interrupted; nothing was done")  # asked at the moment of the interrupt
    handled = False  # inside interp._arguments.run: raise KeyboardInterrupt unless inside an import
    pending = False  # a KeyboardInterrupt raised and not yet seen by run()


def _importing(frame) -> bool:
    """Whether the interrupted code runs inside an import (a frame of Python's import machinery on the stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _on_interrupt(signum, frame) -> None:
    if _Interrupts.handled and not _importing(frame):
        _Interrupts.pending = True  # until run() sees it: a finaliser that swallows it gets it sent again
        raise KeyboardInterrupt  # run() prints the one line; the writers and training clean up on the way
    os.write(2, (_Interrupts.line() + "\n").encode("utf-8", "backslashreplace"))
    if "interp._io" in sys.modules:  # the lock files of the checkpoints this run holds
        sys.modules["interp._io"].remove_on_exit_now()
    os._exit(130)  # nothing is half-written: an output is written whole by a rename, at the end


def _guard_interrupts(line: str) -> None:
    """Install ``_on_interrupt`` (unless SIGINT is ignored, as in a background job) with ``line`` as its message."""
    _Interrupts.line = staticmethod(lambda: line)
    if _signal.getsignal(_signal.SIGINT) in (_signal.default_int_handler, _on_interrupt):
        _signal.signal(_signal.SIGINT, _on_interrupt)


def _guarded() -> bool:
    return _signal.getsignal(_signal.SIGINT) is _on_interrupt


def _starting_line(argv: list[str]) -> str:
    command = next((word for word in argv if word in ("verify", "train", "evaluate", "compare", "report")), None)
    return f"interp{' ' + command if command else ''}: interrupted; nothing was done"


if __name__ == "__main__" or os.path.basename(getattr(sys.modules.get("__main__"), "__file__", None) or "") == "interp":
    _guard_interrupts(_starting_line(sys.argv[1:]))  # the program: guarded before anything else is imported

import argparse  # noqa: E402 (after the guard)
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

from interp import _arguments as arguments  # noqa: E402
from interp._arguments import run  # noqa: E402
from interp._checks import InsufficientMemory, InvalidInput  # noqa: E402


def _resend() -> None:
    if _Interrupts.pending:  # not seen meanwhile
        _signal.raise_signal(_signal.SIGINT)


@contextmanager
def _handling_interrupts() -> Iterator[None]:
    """The command's own code: a Ctrl-C raises KeyboardInterrupt (outside imports, ``_on_interrupt``). One raised
    where Python cannot propagate it (a ``__del__``, a weakref callback, garbage collection: "Exception ignored in
    ...") would be printed and lost, and the command would finish: the ``sys.unraisablehook`` installed here sends it
    again 5 ms later from a thread, so that it lands in ordinary code, and one still unseen when the command returns
    is raised then."""
    previous = sys.unraisablehook

    def resend_swallowed(unraisable) -> None:
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):
            return previous(unraisable)
        import threading

        threading.Timer(0.005, _resend).start()

    _Interrupts.handled, _Interrupts.pending = True, False
    sys.unraisablehook = resend_swallowed
    try:
        yield
        if _Interrupts.pending:  # raised, swallowed, and its second delivery has not landed yet
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        _Interrupts.pending = False
        raise
    finally:
        _Interrupts.handled = False
        sys.unraisablehook = previous


# the option behind each size a memory refusal names, where it is not "--" + the name with "-" for "_"
EVALUATE_FLAGS = {"n_tasks": "--tasks", "d": "the checkpoint's d", "k": "the checkpoint's k", "chunk": "chunk"}
REPORT_FLAGS = {**EVALUATE_FLAGS, "n": "the report's n", "steps": "the report's steps"}


@contextmanager
def _flags(names: dict[str, str]) -> Iterator[None]:
    """Re-word a memory refusal with the command's option names (``--tasks`` for ``n_tasks``, ...)."""
    try:
        yield
    except InsufficientMemory as error:
        flags = {key: names.get(key, "--" + key.replace("_", "-")) for key in
                 {size for need in error.needs for size in need.sizes}}
        raise InvalidInput(error.describe(flags)) from None


def default_threads(torch_default: int) -> int:
    """The torch threads of ``evaluate`` and ``report`` without ``--threads``: torch's default, lowered to the cores
    this process may use that other work leaves idle (the cores minus the 1-minute load average), at least 1. A
    torch parallel region waits for its slowest thread, so a thread on a core another process keeps busy stalls
    every operation: on a loaded 2-core machine the report took 3 min 42 s at 2 threads and 32 s at 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):
        busy = 0.0
    return max(1, min(torch_default, cores, int(cores - busy)))


def _runtime(args: argparse.Namespace, share_cores: bool = False) -> None:
    """Allocator tuning and the --threads option of the long-running commands (``share_cores``: without
    --threads, ``default_threads``)."""
    import torch

    from interp._runtime import apply_defaults

    apply_defaults()  # the allocator setting, once per process, unless INTERP_TUNE_ALLOCATOR=0
    if args.threads is not None:  # 1 to the CPU cores: checked when the options were parsed (arguments.threads)
        torch.set_num_threads(args.threads)
    elif share_cores:
        torch.set_num_threads(default_threads(torch.get_num_threads()))


def _verify_memory_needs(args: argparse.Namespace) -> list:
    """A lower bound of what ``interp verify`` holds at once (``interp.verify.verify_constructions``), at the larger of
    two moments for the largest task size: drawing the tasks (noise, location and scale in float64 and the float64
    result: 32 bytes per coordinate), or checking them: the tasks and the reference Lloyd's trajectories over every
    layer, centroids (tasks, layers + 1, k, d) float64 and assignments (tasks, layers + 1, n) int64."""
    from interp._checks import MemoryNeed
    from interp.verify import QUICK_SIZES, SIZES

    def phases(n: int, d: int, k: int) -> list[list[MemoryNeed]]:
        tasks = {"tasks": args.tasks, "n": n, "d": d}
        trajectories = {"tasks": args.tasks, "layers": args.layers, "n": n, "k": k, "d": d}
        return [[MemoryNeed("the tasks while they are drawn", tasks, 32 * args.tasks * n * d)],
                [MemoryNeed("the tasks", tasks, 8 * args.tasks * n * d),
                 MemoryNeed("the reference Lloyd's trajectories over every layer", trajectories,
                            8 * args.tasks * (args.layers + 1) * (k * d + n))]]

    candidates = [needs for size in (QUICK_SIZES if args.quick else SIZES) for needs in phases(*size)]
    return max(candidates, key=lambda needs: sum(need.nbytes for need in needs))


def _verify(args: argparse.Namespace) -> int:
    from interp._checks import check_memory
    from interp.verify import run_verify

    with _flags({"n": "the task size's n", "d": "the task size's d", "k": "the task size's k"}):
        check_memory("this verification", _verify_memory_needs(args))
    outcome = run_verify(n_layers=args.layers, n_tasks=args.tasks, gamma=args.gamma, quick=args.quick)
    print(outcome.report)
    return 0 if outcome.passed else 1


def _train(args: argparse.Namespace) -> None:
    import dataclasses

    from interp._checks import check_device, check_memory, check_output_file
    from interp.training.config import TrainConfig

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
              if getattr(args, f.name) is not None}
    config = TrainConfig(**values)  # checked before torch is imported: a bad value is refused at once
    device = check_device(args.device, "--device")
    _runtime(args)
    from interp.training.train import TrainingDiverged, train

    # --out is also the input a run resumes from (it writes over it on purpose): a regular file or a new name
    check_output_file(args.out, "--out", devices=False)
    with _flags({}):
        check_memory("this training run", config.memory_needs())
    try:
        meta = train(config, args.out, resume=not args.no_resume, progress=not args.no_progress, device=device)
    except TrainingDiverged as error:
        raise InvalidInput(str(error)) from None
    last = meta["history"][-1]
    print(f"step {meta['step']}: relative validation objective {last['relative_objective']:.4f} "
          f"(< 1 beats one Lloyd step); checkpoint {args.out}")


def _evaluate(args: argparse.Namespace) -> None:
    from interp._checks import check_device, check_output_folder, check_outputs_spare_inputs
    from interp.evaluate import OUTPUT_FILES, EvalConfig, evaluate, summarise, write_csv
    from interp.model.checkpoint import load_model, resolve
    from interp.report.plots import write_evaluation_page
    from interp.tasks import TaskConfig

    device = check_device(args.device, "--device")
    _runtime(args, share_cores=True)
    config = EvalConfig(n_tasks=args.tasks, steps=args.steps, seed=args.seed, inits=tuple(args.inits),
                        protocols=tuple(args.protocols), slot_order=args.slot_order,
                        baselines=not args.no_baselines, lloyd_steps=args.lloyd_steps)
    paths = {str(name): resolve(name) for name in args.checkpoint}
    out = Path(args.out)
    check_outputs_spare_inputs({"--out": [out, *(out / name for name in OUTPUT_FILES)]},
                               {"--checkpoint": list(paths.values())})
    check_output_folder(out, OUTPUT_FILES, "--out")
    models = {name: load_model(path, device=device) for name, path in paths.items()}
    first = next(iter(models.values())).config
    base = TaskConfig(n=args.n, d=first.d if args.d is None else args.d, k=first.k if args.k is None else args.k)
    with _flags({**EVALUATE_FLAGS, "d": "--d", "k": "--k"}):
        rows = evaluate(models, base, config, device=device, progress=not args.no_progress)
    summary = summarise(rows)
    out.mkdir(exist_ok=True)  # its parent exists (checked): at most this one folder is created
    write_csv(rows, out / "evaluation.csv")
    write_csv(summary, out / "summary.csv")
    title = f"{', '.join(models)}: mean log objective, {config.n_tasks} tasks"
    write_evaluation_page(summary, out / "evaluation.html", title)
    baselines = "" if args.no_baselines else f" {'km++ x1':>8} {'km++ x10':>8}"
    last = max(row["step"] for row in summary)  # T, or T + L with Lloyd steps after the model's
    after = "" if last == config.steps else f" = {config.steps} steps + {last - config.steps} Lloyd"
    print(f"{'protocol':<9} {'setting':<16} {'init':<9} {'transformer':>11} {'Lloyd':>8} {'diff':>7}{baselines}  "
          f"(step {last}{after}, median over {len(models)} checkpoint(s); km++: scikit-learn KMeans, k-means++ "
          "starts, to convergence)")
    for row in summary:
        if row["step"] == last:
            diff = row["model_median"] - row["lloyd_median"]
            extra = "" if args.no_baselines else f" {row['kmeanspp_1']:>8.4f} {row['kmeanspp_10']:>8.4f}"
            print(f"{row['protocol']:<9} {row['setting']:<16} {row['init']:<9} {row['model_median']:>11.4f} "
                  f"{row['lloyd_median']:>8.4f} {diff:>+7.4f}{extra}")
    print(f"wrote {out / 'evaluation.csv'}, {out / 'summary.csv'}, {out / 'evaluation.html'}")


def _model_spec(text: str) -> tuple[str, list[str]]:
    """An argparse type for ``compare --model``: NAME=CHECKPOINT[,CHECKPOINT...], NAME a plain name (the
    checkpoints are looked up when the command runs)."""
    name, equals, checkpoints = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKPOINT[,CHECKPOINT...], got {text!r}")
    arguments.plain_name(name)
    parts = checkpoints.split(",")
    if not checkpoints or not all(parts):
        raise argparse.ArgumentTypeError(f"model {name!r} has an empty checkpoint in {text!r}; give "
                                         "NAME=CHECKPOINT[,CHECKPOINT...]")
    return name, parts


def _compare(args: argparse.Namespace) -> None:
    from interp import compare as comparison
    from interp._checks import check_device, check_output_folder, check_outputs_spare_inputs
    from interp.evaluate import EvalConfig
    from interp.hybrid import resolve_lloyd_steps
    from interp.model.checkpoint import resolve
    from interp.tasks import TaskConfig

    names = [name for name, _ in args.model]
    for name in names:
        if names.count(name) > 1:
            raise InvalidInput(f"--model: the name {name!r} is given twice; give each model once, its seeds "
                               "separated by commas")
        if name.casefold() == comparison.LLOYD:
            raise InvalidInput(f"--model: the name {name!r} is Lloyd's row (always shown); call the model otherwise")
    reference = args.reference if args.reference is not None else names[0]
    if reference not in (*names, comparison.LLOYD):
        raise InvalidInput(f"--reference {reference!r}: not a --model name ({', '.join(names)}) nor "
                           f"{comparison.LLOYD}")
    if len(set(args.inits)) != len(args.inits):
        raise InvalidInput(f"--inits {' '.join(args.inits)}: an initialisation is given twice")
    device = check_device(args.device, "--device")
    _runtime(args, share_cores=True)
    config = EvalConfig(n_tasks=args.tasks, steps=args.steps, seed=args.seed, inits=tuple(args.inits),
                        protocols=(args.protocol,), slot_order=args.slot_order, baselines=False,
                        lloyd_steps=args.lloyd_steps)
    paths = {}
    for name, checkpoints in args.model:
        try:
            paths[name] = [resolve(checkpoint) for checkpoint in checkpoints]
        except FileNotFoundError as error:
            raise InvalidInput(f"--model {name}: {error}") from None
        if len({os.path.realpath(path) for path in paths[name]}) != len(paths[name]):
            raise InvalidInput(f"--model {name}: a checkpoint is given twice (each seed counts once)")
    out = Path(args.out)
    check_outputs_spare_inputs({"--out": [out, *(out / name for name in comparison.OUTPUT_FILES)]},
                               {"--model": [path for group in paths.values() for path in group]})
    check_output_folder(out, comparison.OUTPUT_FILES, "--out")
    with arguments.about("--model"):
        models = comparison.load_models(paths, device=device)
    first = next(iter(models.values()))[0].config
    base = TaskConfig(n=args.n, d=first.d, k=first.k)
    with arguments.about("--model"):  # a model of another d or k than the first
        comparison.check_models(models, base, device)
    with _flags(EVALUATE_FLAGS):
        values = comparison.task_values(models, config, base, device=device, progress=not args.no_progress)
    rows = comparison.summary_rows(values, reference)
    out.mkdir(exist_ok=True)  # its parent exists (checked): at most this one folder is created
    written = comparison.write_outputs(values, rows, out)
    lloyd_steps = {name: max(resolve_lloyd_steps(model, config.lloyd_steps) for model in checkpoints)
                   for name, checkpoints in models.items()}
    print(comparison.markdown(rows, config.steps, lloyd_steps))
    print(f"\nwrote {', '.join(map(str, written))}")


def _report(args: argparse.Namespace) -> None:
    from interp._checks import check_device, check_output_file, check_outputs_spare_inputs
    from interp.model.checkpoint import resolve
    from interp.report.builder import build_report

    device = check_device(args.device, "--device")
    _runtime(args, share_cores=True)
    check_outputs_spare_inputs({"--out": [args.out]}, {"--checkpoint": [resolve(args.checkpoint)]})
    check_output_file(args.out, "--out")
    with _flags(REPORT_FLAGS):
        path = build_report(args.checkpoint, args.out, n_tasks=args.tasks, device=device,
                            progress=not args.no_progress)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


def _interrupted_train(args: argparse.Namespace) -> str:
    """What an interrupted ``train`` leaves: its checkpoint holds the last step it saved (writes are atomic)."""
    if Path(args.out).is_file():
        return f"{args.out} holds the last saved step; run the same command to resume"
    return "nothing was saved"


def _interrupted_writer(args: argparse.Namespace) -> str:
    """What an interrupted ``evaluate`` or ``report`` leaves: each output file is written whole (atomically) or not
    at all, at the end."""
    return f"nothing half-written: each output ({args.out}) is written whole at the end, or not at all"


def _add_train_options(parser: argparse.ArgumentParser) -> None:
    import dataclasses

    from interp.training.config import COUNTS, TrainConfig  # torch-free: building the parser imports no torch

    for field in dataclasses.fields(TrainConfig):
        default = field.default
        flag = "--" + field.name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, dest=field.name, type=arguments.boolean,
                                default=None, metavar="BOOL", help=f"default {default}")
        elif field.name == "init_from":
            parser.add_argument(flag, dest=field.name, default=None, metavar="CHECKPOINT",
                                help="start from this checkpoint's weights (shipped name or path); default: fresh")
        elif field.name in ("k_least", "d_least", "n_least"):  # TrainConfig bounds them by k, d, n
            size = field.name.split("_")[0]
            parser.add_argument(flag, dest=field.name, type=arguments.count(), default=None, metavar="N",
                                help=f"each batch draws its own {size} from N to --{size} (default: every task has "
                                     f"--{size})")
        elif field.name == "grad_clip":
            parser.add_argument(flag, dest=field.name, type=float, default=None, help="default: no clipping")
        elif field.name == "seed":
            parser.add_argument(flag, dest=field.name, type=arguments.seed, default=None,
                                help=f"in [0, 2**63), default {default}")
        elif field.name in COUNTS:  # bounded when the options are parsed (TrainConfig checks the same)
            least, largest = COUNTS[field.name]
            bounds = f"{least} to {largest:,}" if largest is not None else f">= {least}"
            parser.add_argument(flag, dest=field.name, type=arguments.count(largest, least), default=None,
                                metavar="N", help=f"{bounds}, default {default}")
        else:
            parser.add_argument(flag, dest=field.name, type=type(default), default=None, help=f"default {default}")


def _add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="torch device the model and tasks run on: cpu (default), "
                        "cuda, cuda:1, mps; refused when this machine lacks it")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interp", description="Transformers that run clustering algorithms.")
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check the exact constructions against Lloyd, layer by layer")
    verify.add_argument("--layers", type=arguments.steps, default=10, metavar="N",
                        help="layers = Lloyd iterations, 1 to 10,000 (default 10)")
    verify.add_argument("--tasks", type=arguments.tasks, default=5, metavar="N",
                        help="tasks per size, 1 to 1,000,000 (default 5)")
    verify.add_argument("--gamma", type=float, default=1e4, help="inverse temperature of the validation (1e4)")
    verify.add_argument("--quick", action="store_true", help="small sizes only")
    verify.set_defaults(func=_verify)
    train = commands.add_parser("train", help="train the one-layer model on a task distribution (resumable)")
    train.add_argument("--out", required=True, help="checkpoint path (.safetensors); an existing one is resumed")
    train.add_argument("--no-resume", action="store_true", help="start over even if --out exists")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--threads", type=arguments.threads, default=None, help="torch threads (1 to the CPU cores)")
    _add_device_option(train)
    _add_train_options(train)
    train.set_defaults(func=_train, interrupted=_interrupted_train)
    evaluate = commands.add_parser("evaluate", help="the papers' evaluation protocol against Lloyd")
    evaluate.add_argument("--checkpoint", nargs="+", required=True, help="shipped names or paths (several = seeds)")
    evaluate.add_argument("--out", required=True, help="folder for evaluation.csv, summary.csv, evaluation.html")
    evaluate.add_argument("--protocols", nargs="+", default=["main"], help="main length shift family")
    evaluate.add_argument("--inits", nargs="+", default=["random", "kmeans++", "gonzalez"])
    evaluate.add_argument("--tasks", type=arguments.tasks, default=320, metavar="N",
                          help="tasks per setting, 1 to 1,000,000 (default 320)")
    evaluate.add_argument("--steps", type=arguments.steps, default=20, metavar="N",
                          help="steps of the model and of Lloyd, 1 to 10,000 (default 20)")
    evaluate.add_argument("--n", type=arguments.count(), default=512, metavar="N",
                          help="points per task (default 512; the memory the tasks need bounds it)")
    evaluate.add_argument("--k", type=arguments.count(), default=None, metavar="N",
                          help="clusters per task (default: the first checkpoint's k; one in its served range)")
    evaluate.add_argument("--d", type=arguments.count(), default=None, metavar="N",
                          help="dimensions per task (default: the first checkpoint's d; fewer are padded or tiled)")
    evaluate.add_argument("--seed", type=arguments.seed, default=20261130, help="in [0, 2**63), default 20261130")
    evaluate.add_argument("--slot-order", choices=["fixed", "shuffle"], default=None,
                          help="the centroids' slot order at each step (default: each checkpoint's recommended one)")
    evaluate.add_argument("--lloyd-steps", type=arguments.lloyd_steps, default=None, metavar="N",
                          help="Lloyd steps after the model's (0 to 10,000; default: each checkpoint's recommended "
                               "number, interp.hybrid)")
    evaluate.add_argument("--no-baselines", action="store_true",
                          help="leave out the scikit-learn KMeans columns (k-means++, 1 and 10 starts)")
    evaluate.add_argument("--threads", type=arguments.threads, default=None,
                          help="torch threads, 1 to the CPU cores (default: the cores other work leaves idle)")
    evaluate.add_argument("--no-progress", action="store_true",
                          help="no progress bar (shown on stderr when it is a terminal: per checkpoint and protocol)")
    _add_device_option(evaluate)
    evaluate.set_defaults(func=_evaluate, interrupted=_interrupted_writer)
    compare = commands.add_parser("compare", help="several models (each with its seeds) side by side, same tasks")
    compare.add_argument("--model", action="append", type=_model_spec, required=True,
                         metavar="NAME=CKPT[,CKPT...]", help="one model: a name and its checkpoints (shipped names "
                         "or paths; several = seeds, averaged per task); repeat for each model")
    compare.add_argument("--out", required=True, help="folder for compare.csv and compare_tasks.csv")
    compare.add_argument("--reference", default=None, metavar="NAME",
                         help="the model the others are paired with: a --model name or lloyd (default: the first)")
    compare.add_argument("--protocol", choices=["main", "length", "shift", "family"], default="main",
                         help="main (default), length, shift or family (the last three: the first init only)")
    compare.add_argument("--inits", nargs="+", choices=["random", "first", "kmeans++", "gonzalez"],
                         default=["random"], help="initialisations, one table each (default random)")
    compare.add_argument("--tasks", type=arguments.tasks, default=320, metavar="N",
                         help="tasks per setting, 1 to 1,000,000 (default 320)")
    compare.add_argument("--steps", type=arguments.steps, default=20, metavar="N",
                         help="steps of the models and of Lloyd, 1 to 10,000 (default 20)")
    compare.add_argument("--n", type=arguments.count(), default=512, metavar="N",
                         help="points per task (default 512; the memory the tasks need bounds it)")
    compare.add_argument("--seed", type=arguments.seed, default=20261130, help="in [0, 2**63), default 20261130")
    compare.add_argument("--slot-order", choices=["fixed", "shuffle"], default=None,
                         help="the centroids' slot order at each step (default: each checkpoint's recommended one)")
    compare.add_argument("--lloyd-steps", type=arguments.lloyd_steps, default=None, metavar="N",
                         help="Lloyd steps after each model's (0 to 10,000; default: each checkpoint's recommended "
                              "number, interp.hybrid); Lloyd's row runs --steps plus the largest of them")
    compare.add_argument("--threads", type=arguments.threads, default=None,
                         help="torch threads, 1 to the CPU cores (default: the cores other work leaves idle)")
    compare.add_argument("--no-progress", action="store_true",
                         help="no progress bar (shown on stderr when it is a terminal)")
    _add_device_option(compare)
    compare.set_defaults(func=_compare, interrupted=_interrupted_writer)
    report = commands.add_parser("report", help="one self-contained HTML report about a model")
    report.add_argument("--checkpoint", required=True, help="shipped name or path")
    report.add_argument("--out", required=True, help="HTML file to write")
    report.add_argument("--tasks", type=arguments.tasks, default=128, metavar="N",
                        help="evaluation tasks, 1 to 1,000,000 (default 128)")
    report.add_argument("--threads", type=arguments.threads, default=None,
                        help="torch threads, 1 to the CPU cores (default: the cores other work leaves idle)")
    report.add_argument("--no-progress", action="store_true",
                        help="no progress bar (shown on stderr when it is a terminal: per section, with an estimate)")
    _add_device_option(report)
    report.set_defaults(func=_report, interrupted=_interrupted_writer)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command: 0 on success, 1 when ``verify`` fails a check, 2 on bad input, 130 on Ctrl-C; other errors
    propagate (``interp._arguments.run``, shared with the analyses scripts)."""
    program = argv is None  # the process's own command line: Ctrl-C guarded from the start (module docstring)
    if program and not _guarded():
        _guard_interrupts(_starting_line(sys.argv[1:]))
    args = build_parser().parse_args(argv)
    prog, note = f"interp {args.command}", getattr(args, "interrupted", None)
    if not _guarded():
        return run(lambda _: args.func(args), prog, interrupted=(lambda: note(args)) if note else None)
    _Interrupts.line = staticmethod(lambda: f"{prog}: interrupted" + (f"; {note(args)}" if note else ""))

    def command(_: object) -> object:
        with _handling_interrupts():
            return args.func(args)

    try:
        return run(command, prog, interrupted=(lambda: note(args)) if note else None)
    finally:
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # done: the process only exits from here


if __name__ == "__main__":
    sys.exit(main())
