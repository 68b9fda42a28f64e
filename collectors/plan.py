"""``tracekit record``'s options as one plan: checked for conflicts, resolved, then run in one of five
modes (tensor parallel, a user's script, the serving engine, assisted generation, the built-in workload).

``RecordPlan`` holds the options as given (the command's parameter names, so the command builds it
from its parameters); ``given`` says which options were typed on the command line, as typed.
``validate`` refuses each conflicting pair in one line (UsageError) before anything is built;
``run`` checks that torch and transformers are installed, validates, resolves the model, device and
shape, records and returns the exit status. What is shown while it runs (progress, the summary,
counters, the repeats' spread) goes through a ``RecordDisplay`` the caller implements; None shows
nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from tracekit.errors import UsageError
from tracekit.model.progress import Listener

if TYPE_CHECKING:
    from tracekit.collectors.ncu import CountersResult
    from tracekit.collectors.options import RecordOptions
    from tracekit.collectors.profiler import StepWindow
    from tracekit.store.rundir import RunDir

# Options of the built-in workload: meaningless for a script (``tracekit record -- python my.py``).
WORKLOAD_ONLY = ("model", "model_preset", "trust_remote_code", "device", "dtype", "shape", "input_tokens",
                 "output_tokens", "batch", "n_requests", "warmup", "seed", "with_memory", "quant")
# --serve's own options and their defaults: given to another mode they are refused.
DEFAULT_MAX_BATCH_TOKENS = 512
DEFAULT_ASSISTANT_TOKENS = 4


class RecordDisplay(Protocol):
    """What a caller shows while a plan runs."""

    def progress(self, terminal: IO[str]) -> Listener:
        """The built-in workload's progress listener, writing to ``terminal`` (the real stderr)."""
        ...

    def recorded(self, path: Path) -> None:
        """A run was recorded at ``path`` (the first one of --repeat): its summary."""
        ...

    def sharded(self, path: Path, world: int, rank0: Path) -> None:
        """A --tp run was recorded at ``path`` over ``world`` ranks; ``rank0``: rank 0's run."""
        ...

    def counted(self, result: CountersResult) -> None:
        """--counters measured the recorded run."""
        ...

    def repeated(self, manifests: list[dict[str, Any]], out: Path) -> None:
        """--repeat recorded these runs under ``out``."""
        ...


@dataclass(frozen=True)
class RecordPlan:
    model: str | None = None
    model_preset: str | None = None
    trust_remote_code: bool = False
    device: str = "auto"
    dtype: str = "auto"
    shape: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    batch: int = 1
    n_requests: int | None = None
    serve: bool = False
    rate: float | None = None
    lengths_file: Path | None = None
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    kv_blocks: int | None = None
    cuda_graphs: bool = False
    assistant: str | None = None
    assistant_tokens: int = DEFAULT_ASSISTANT_TOKENS
    warmup: int = 2
    out: Path | None = None
    force: bool = False
    trace_steps: str | None = None
    use_compile: bool = False
    tp: int | None = None
    with_counters: bool = False
    with_memory: bool = False
    quant: str = "none"
    no_nvml: bool = False
    sample_hz: float = 100.0
    seed: int = 0
    repeat: int = 1
    quiet: bool = False
    script: tuple[str, ...] = ()
    command: tuple[str, ...] = ("tracekit", "record")  # the command line, for run.json
    given: tuple[tuple[str, str], ...] = ()  # (parameter name, "--flag VALUE" as typed), in the command's order

    @property
    def mode(self) -> str:
        """tp, script, serve, assisted or workload."""
        if self.tp is not None:
            return "tp"
        if self.script:
            return "script"
        if self.serve:
            return "serve"
        return "assisted" if self.assistant is not None else "workload"

    def given_of(self, *names: str) -> list[str]:
        """The options among ``names`` typed on the command line, as typed, in the command's order."""
        return [text for name, text in self.given if name in names]

    def window(self) -> StepWindow | None:
        from tracekit.collectors.profiler import parse_trace_steps

        return parse_trace_steps(self.trace_steps)

    # --- validation ---------------------------------------------------------------------

    def validate(self) -> None:
        """Refuse what does not combine, one line each (UsageError); resolves nothing."""
        self.window()
        self._check_modes()
        for flag, on in (("--memory", self.with_memory), (f"--quant {self.quant}", self.quant != "none")):
            bad = [k for k, v in (("--tp", self.tp is not None), ("a script", bool(self.script)),
                                  ("--assistant", self.assistant is not None)) if v]
            if on and bad:
                raise UsageError(f"{flag} does not combine with {bad[0]} yet")
        if self.with_memory and self.serve:
            raise UsageError("--memory does not combine with --serve yet (the profiler's memory events and "
                             "profile_all_threads exclude each other)")
        if self.tp is not None and self.with_counters:
            raise UsageError("--counters does not combine with --tp yet: run tracekit counters on a rank's run")
        if self.tp is not None:
            self._check_tp()
            return
        if self.script and self.use_compile:
            raise UsageError(
                "--compile applies to the built-in workload, not to a script (compile in your script)"
            )
        if self.no_nvml and self.given_of("sample_hz"):
            raise UsageError(f"--sample-hz {self.sample_hz:g} and --no-nvml conflict: there is nothing to sample")
        if self.script:
            workload_only = self.given_of(*WORKLOAD_ONLY)
            if workload_only:
                raise UsageError(
                    f"{', '.join(workload_only)} and the script {' '.join(self.script)!r} conflict: "
                    "these options shape the built-in workload; a script builds its own model and requests"
                )
            return
        if self.model_preset is not None and self.model is not None:
            raise UsageError(f"--model {self.model} and --model-preset {self.model_preset} conflict: "
                             "give one (--model takes presets too)")
        if self.model_preset is not None:
            from tracekit.collectors.presets import MODEL_PRESETS

            if self.model_preset not in MODEL_PRESETS:
                raise UsageError(f"--model-preset {self.model_preset!r}: known presets: {', '.join(MODEL_PRESETS)}")
        mix = self._mix()
        if not self.serve and (len(mix) != 1 or mix[0] == "agentic"):
            raise UsageError(f"--shape {self.shape or 'smoke'}: a mix of shapes and the agentic shape need --serve")
        if self.repeat > 1 and self.with_counters:
            raise UsageError("--repeat and --counters conflict: measure counters on one run")

    def _check_modes(self) -> None:
        """--serve and --assistant are workloads of their own: what they do not combine with."""
        serve_only = {"--rate": self.rate is not None, "--lengths": self.lengths_file is not None,
                      "--max-batch-tokens": self.max_batch_tokens != DEFAULT_MAX_BATCH_TOKENS,
                      "--kv-blocks": self.kv_blocks is not None, "--cuda-graphs": self.cuda_graphs}
        for mode, on in (("--serve", self.serve), ("--assistant", self.assistant is not None)):
            if not on:
                continue
            others = {"a script": bool(self.script), "--tp": self.tp is not None, "--compile": self.use_compile,
                      "--trace-steps": self.trace_steps is not None, "--batch": self.batch != 1,
                      "--assistant": self.serve and self.assistant is not None}
            bad = [k for k, v in others.items() if v]
            if bad:
                why = " (the engine batches the requests itself)" if mode == "--serve" and bad[0] == "--batch" else ""
                raise UsageError(f"{mode} does not combine with {bad[0]}{why}")
        if not self.serve:
            given = [k for k, v in serve_only.items() if v]
            if given:
                raise UsageError(f"{given[0]} applies to --serve only")
        if self.assistant is None and self.assistant_tokens != DEFAULT_ASSISTANT_TOKENS:
            raise UsageError("--assistant-tokens applies to --assistant only")

    def _check_tp(self) -> None:
        for given, flag in ((self.script, "a script"), (self.use_compile, "--compile"),
                            (self.trace_steps, "--trace-steps")):
            if given:
                raise UsageError(f"--tp does not combine with {flag} yet")
        if self.device not in ("auto", "cpu", "cuda"):
            # Ranks take GPUs 0..N-1 (LOCAL_RANK); choose them with CUDA_VISIBLE_DEVICES instead.
            raise UsageError(
                f"--tp with --device {self.device}: use auto, cpu or cuda (CUDA_VISIBLE_DEVICES picks GPUs)"
            )

    def _mix(self) -> list[str]:
        return [x.strip() for x in (self.shape or "smoke").split(",") if x.strip()]

    # --- running ------------------------------------------------------------------------

    def run(self, display: RecordDisplay | None = None) -> int:
        """Record as planned; the exit status (a script's own)."""
        import importlib.util

        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            raise UsageError(f"tracekit record needs {' and '.join(missing)}: pip install 'tracekit-llm[record]'")
        self.validate()
        if self.mode == "tp":
            return self._run_tp(display)
        if self.mode == "script":
            return self._run_script(display)
        one, opts = self._workload(display)
        if self.repeat > 1:
            return self._repeat(one, opts, display)
        run = one(opts)
        if display is not None:
            display.recorded(run.path)
        if self.with_counters:
            self._counters(run.path, display)
        return 0

    def _run_tp(self, display: RecordDisplay | None) -> int:
        """``--tp N``: the built-in workload sharded over N ranks by tracekit.collectors.tp."""
        from tracekit.collectors import presets
        from tracekit.collectors import workload as wl
        from tracekit.collectors.options import default_out
        from tracekit.collectors.tp import TPOptions, launch, rank_dir

        assert self.tp is not None
        dev = wl.resolve_device(self.device)
        name = self._model_name(dev)
        presets.resolve_model(name)  # a bad name or path fails here, before N processes start
        sp = presets.resolve_shape(self.shape or "smoke")
        run = launch(
            TPOptions(
                out=self.out or default_out(f"{sp.name}-tp{self.tp}"),
                world_size=self.tp,
                model=name,
                shape=sp.name,
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                dtype=self.dtype,
                device=dev,
                batch=self.batch,
                requests=self.n_requests or 1,
                warmup=self.warmup,
                seed=self.seed,
                nvml=not self.no_nvml,
                force=self.force,
            )
        )
        if display is not None:
            display.sharded(run.path, self.tp, rank_dir(run.path, 0))
        return 0

    def _run_script(self, display: RecordDisplay | None) -> int:
        from tracekit.collectors.options import RecordOptions, default_out
        from tracekit.collectors.script import run_script

        script = self.script
        opts = RecordOptions(
            out=self.out or default_out(Path(script[-1] if len(script) == 1 else script[1]).stem or "script"),
            force=self.force,
            nvml=not self.no_nvml,
            sample_hz=self.sample_hz,
            trace_steps=self.window(),
            quiet=self.quiet,
            command=self.command,
        )
        run, code = run_script(list(script), opts)
        if display is not None:
            display.recorded(run.path)
        if self.with_counters and code == 0:
            self._counters(run.path, display)
        return code

    def _model_name(self, dev: str) -> str:
        from tracekit.collectors import presets

        name = self.model or self.model_preset
        return name or (presets.GPU_DEFAULT_MODEL if dev.startswith("cuda") else presets.CPU_DEFAULT_MODEL)

    def _workload(self, display: RecordDisplay | None) -> tuple[Callable[[RecordOptions], RunDir], RecordOptions]:
        """The built-in, serving or assisted workload resolved: (record one run to opts.out, the options)."""
        from tracekit.collectors import presets
        from tracekit.collectors import workload as wl
        from tracekit.collectors.options import RecordOptions, default_out

        dev = wl.resolve_device(self.device)
        spec = presets.resolve_model(self._model_name(dev))
        mix = self._mix()
        shape = ",".join(mix)
        n_requests = self.n_requests
        lengths = None
        if self.serve:
            from tracekit.collectors import serve as sv

            for m in mix:
                sv.serve_shape(m)  # an unknown name fails here, in one line
            lengths = sv.read_lengths(self.lengths_file) if self.lengths_file is not None else None
            n_requests = n_requests or (len(lengths) if lengths else 16)
            if lengths is not None:
                mix = ["lengths"]
            shape = ",".join(mix)
        n_requests = n_requests or 1
        # With --serve each request has its own shape (serve.plan); the config's lengths are a placeholder.
        sp = presets.SHAPES.get(mix[0], presets.SHAPES["chat"]) if self.serve else presets.resolve_shape(mix[0])
        custom = self.input_tokens is not None or self.output_tokens is not None
        cfg = wl.WorkloadConfig(
            model=spec,
            device=dev,
            dtype=wl.resolve_dtype(self.dtype, dev),
            shape=(shape if self.serve else sp.name) + ("-custom" if custom else ""),
            input_tokens=self.input_tokens or sp.input_tokens,
            output_tokens=self.output_tokens or sp.output_tokens,
            batch=self.batch,
            requests=n_requests,
            warmup=self.warmup,
            seed=self.seed,
            trust_remote_code=self.trust_remote_code,
            compile=self.use_compile,
            quant=self.quant,
            memory=self.with_memory,
        )
        if cfg.output_tokens < 1:
            raise UsageError("--output-tokens must be at least 1")
        label = "serve" if self.serve else f"{cfg.shape}-assisted" if self.assistant else cfg.shape
        opts = RecordOptions(
            out=self.out or default_out(label),
            force=self.force,
            nvml=not self.no_nvml and dev.startswith("cuda"),
            sample_hz=self.sample_hz,
            trace_steps=self.window(),
            cuda=dev.startswith("cuda"),
            device_index=int(dev.split(":", 1)[1]) if ":" in dev else 0,
            quiet=self.quiet,
            command=self.command,
            nvml_off_reason="disabled with --no-nvml" if self.no_nvml else "device is cpu: no GPU to sample",
            memory=self.with_memory,
        )

        def one(opts: RecordOptions) -> RunDir:
            if self.serve:
                from tracekit.collectors import serve as sv

                requests = sv.plan(mix, n_requests, self.rate, self.seed, lengths=lengths,
                                   input_tokens=self.input_tokens, output_tokens=self.output_tokens)
                return sv.run_serve(cfg, sv.ServeConfig(requests=requests, rate=self.rate,
                                                        max_batch_tokens=self.max_batch_tokens,
                                                        num_blocks=self.kv_blocks, cuda_graphs=self.cuda_graphs),
                                    opts)
            if self.assistant is not None:
                from tracekit.collectors.assisted import run_assisted

                return run_assisted(cfg, self.assistant, self.assistant_tokens, opts)
            from tracekit.collectors.workload_runner import run_workload

            return run_workload(cfg, opts, progress=display.progress if display is not None else None)

        return one, opts

    def _repeat(self, one: Callable[[RecordOptions], RunDir], opts: RecordOptions,
                display: RecordDisplay | None) -> int:
        """The same recording n times under opts.out (repeat-1 ... repeat-n)."""
        if opts.out.exists() and not opts.force and any(opts.out.iterdir()):
            raise UsageError(f"--out {opts.out}: exists and is not empty (--force replaces it)")
        opts.out.mkdir(parents=True, exist_ok=True)
        manifests = []
        for i in range(1, self.repeat + 1):
            run = one(dataclasses.replace(opts, out=opts.out / f"repeat-{i}"))
            manifests.append(run.read_manifest())
            if display is not None and i == 1:
                display.recorded(run.path)
        if display is not None:
            display.repeated(manifests, opts.out)
        return 0

    def _counters(self, path: Path, display: RecordDisplay | None) -> None:
        """``--counters``: the recorded run's steps under Nsight Compute; a failure is one line, the run kept."""
        from tracekit.collectors.ncu import CountersError, CountersOptions, collect

        try:
            res = collect(path, CountersOptions(steps=self.window()))
        except CountersError as exc:
            raise CountersError(f"run kept at {path}; counters: {exc.message}") from None
        if display is not None:
            display.counted(res)
