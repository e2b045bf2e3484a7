"""`mmrlvr rollout-server`: vLLM's engine for one policy behind a small HTTP API (vLLM environment only).

The way TRL's `trl vllm-serve` works: vLLM's `LLM` (its own scheduler, sampler and weight loader)
wrapped in a FastAPI app served by uvicorn, vLLM's own serving stack. The engine is built by
`VLLMRolloutEngine`, so it samples with exactly the colocated engine's settings: the learner's
pixel limits (`mm_processor_kwargs`), allowed token ids, processed log-probs, per-request seeds.

Endpoints (JSON):
- GET  /health            {"server": "mmrlvr-rollout-server", "version": n}: the start-up probe
- GET  /info              what a client checks before its first request (model family, vocabulary,
                          suppressed ids, pixel limits, dtype) and the current policy version
- POST /generate          {"requests": [...], "sampling": [...]} -> {"outputs": [...], "version": n}
- POST /update_weights    {"path": DIR}: load DIR/model.safetensors (a client on this machine wrote
                          it in shared memory), then reset the prefix and encoder caches
- POST /update_weights_upload  the safetensors file as the body (a client on another machine)
- POST /weight_channel    {"backend": "nccl"|"gloo"} -> {"port": p}: host the broadcast group's store
- POST /weight_channel/join   join that group (the client joins at the same time)
- POST /update_weights_channel  {"spec": [[name, dtype, shape], ...]}: receive the client's broadcast
                          of those tensors in vLLM's worker and load them, then reset the caches
                          (`mmrlvr.rollout.weight_channel`; NCCL between GPUs, gloo on a loopback CPU)

Requests are served one at a time (a lock): a weight update never lands inside a generation.
The policy version counts weight updates since the server started (0: the directory's weights).

Several GPUs (`--tensor-parallel-size N --data-parallel-size M`): each of M replicas
(`server_replicas`) cuts the model over N devices with vLLM's tensor parallelism; a generation is
spread over the replicas, and every weight update reaches all N x M workers (each joins the weight
channel's group) and resets every replica's caches before the one version number moves. A
broadcast that breaks mid-way leaves the workers partly loaded (they load as the bytes arrive, so
no second copy of the model is ever held): the server then refuses generations until a sync
completes.

Every POST needs the server's key (`server_key`: `Authorization: Bearer <key>`, else 401) and is
bounded per request (`server_guard`: completions, tokens, images and their pixels, body size,
the weight channel's timeout), so one caller can neither swap the policy nor hold the lock for long.
"""


import os  # no `from __future__ import annotations`: FastAPI reads the endpoints' annotations (Request) at runtime
import signal
import sys
import tempfile
import threading

from mmrlvr.rollout.server_guard import BodyTooLarge, Guard, RequestLimits
from mmrlvr.rollout.server_http import SERVER_NAME
from mmrlvr.rollout.server_key import bind_problem, default_key_file, server_key, write_key_file
from mmrlvr.rollout.server_layout import set_cpu_binding
from mmrlvr.rollout.server_replicas import Replicas
from mmrlvr.rollout import weight_channel
from mmrlvr.rollout.server_wire import decode_request, encode_outputs
from mmrlvr.rollout.vllm_inputs import model_vocab_size, processor_kwargs


def build_engine(args):
    """The colocated engine's `VLLMRolloutEngine`, configured from the command line."""
    from transformers import AutoConfig

    from mmrlvr.config import ModelConfig
    from mmrlvr.models.load import _load_processor, resolve_model_path
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    path = resolve_model_path(args.model)
    model_config = AutoConfig.from_pretrained(path)
    mcfg = ModelConfig(path=path, dtype=args.dtype, min_pixels=args.min_pixels, max_pixels=args.max_pixels,
                       video_min_pixels=args.video_min_pixels, video_max_pixels=args.video_max_pixels)
    processor = _load_processor(path, mcfg, model_config.model_type)
    tp = int(getattr(args, "tensor_parallel_size", 1))
    if tp > 1 and _on_cpu():
        set_cpu_binding(tp)
    return VLLMRolloutEngine(path, processor, model_config, dtype=args.dtype,
                             gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
                             sleep=False, seed=args.seed, enforce_eager=args.enforce_eager,
                             max_num_batched_tokens=args.max_num_batched_tokens,
                             worker_extension_cls="mmrlvr.rollout.vllm_channel.WeightChannelExtension",
                             tensor_parallel_size=tp)


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def build_server_engine(args):
    """The engine, or M data-parallel replicas of it (`server_replicas.Replicas`) that look like one."""
    m, n = int(getattr(args, "data_parallel_size", 1)), int(getattr(args, "tensor_parallel_size", 1))
    if m == 1:
        return build_engine(args)
    from mmrlvr.rollout.server_replicas import device_slice

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:  # replica 0 (this process) takes the first N devices; the children the next ones
        os.environ["CUDA_VISIBLE_DEVICES"] = device_slice(visible, 0, n)
    try:
        engine = build_engine(args)
    finally:
        if visible:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
    return Replicas(engine, build_engine, args, m, n)


class RolloutService:
    """The endpoints' logic, apart from HTTP (tests drive it directly too)."""

    def __init__(self, engine, model_path: str, dtype: str, host: str = "127.0.0.1",
                 limits: RequestLimits | None = None, tensor_parallel: int = 1, data_parallel: int = 1,
                 bucket_bytes: int = weight_channel.BUCKET_BYTES):
        self.engine = engine
        self.tensor_parallel, self.data_parallel, self.bucket_bytes = tensor_parallel, data_parallel, bucket_bytes
        self.broken = False  # a broadcast broke mid-way: the workers hold a mix of old and new weights
        self.limits = limits or RequestLimits()
        self.host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # gloo binds a concrete address
        self.model_path = model_path
        self.dtype = dtype
        self.version = 0
        self.lock = threading.Lock()
        self.vocab_size = len(engine.allowed_ids) + len(set(engine.suppress_ids))

    def info(self) -> dict:
        e = self.engine
        return {"server": SERVER_NAME, "model": self.model_path, "model_type": e.model_type, "dtype": self.dtype,
                "vocab_size": self.vocab_size, "suppress_ids": list(e.suppress_ids), "stop_ids": list(e.stop_ids),
                "processor_kwargs": processor_kwargs(e.processor), "version": self.version,
                "tensor_parallel_size": self.tensor_parallel, "data_parallel_size": self.data_parallel,
                "max_model_len": int(e.llm.llm_engine.vllm_config.model_config.max_model_len)}

    def generate(self, payload: dict) -> dict:
        reqs, fields = payload.get("requests"), payload.get("sampling")
        if not isinstance(reqs, list) or not isinstance(fields, list) or len(reqs) != len(fields):
            raise ValueError("expected 'requests' and 'sampling' lists of the same length")
        self.limits.check_count("prompts in one request", len(reqs), self.limits.max_prompts)
        checked = [self.limits.check_sampling(f) for f in fields]  # all checked before any image is decoded
        prompts = [decode_request(r, self.limits) for r in reqs]
        params = [self.engine.params_from_fields(f) for f in checked]
        with self.lock:
            if self.broken:
                raise ValueError("a weight broadcast broke mid-way and left this server's weights partly loaded: "
                                 "sync the weights again before generating")
            raw = self.engine.generate_raw(prompts, params)
            return {"outputs": encode_outputs(raw), "version": self.version}

    def update_from_dir(self, path: str) -> dict:
        from safetensors.torch import load_file

        file = os.path.join(path, "model.safetensors")
        if not os.path.isfile(file):
            raise ValueError(f"no model.safetensors in {path}")
        with self.lock:
            if isinstance(self.engine, Replicas):  # data-parallel replicas: each loads the file
                self.engine.load_file(file)
            else:
                self.engine.load_pairs(load_file(file).items())
            self.broken = False
            self.version += 1
            return {"version": self.version}

    def _rpc(self, name: str, args_of) -> list:
        """`collective_rpc` on every worker of every replica, replica k with `args_of(k)`: the workers' answers."""
        if isinstance(self.engine, Replicas):
            return [a for answers in self.engine.collective_rpc(name, args_of) for a in answers]
        return list(self.engine.llm.collective_rpc(name, args=args_of(0)))

    def channel_store(self, payload: dict) -> dict:
        """Host the broadcast group's store in the worker; the client joins it at the port returned."""
        backend = str(payload.get("backend", ""))
        if backend not in ("nccl", "gloo"):
            raise ValueError(f"backend: expected nccl or gloo, got {backend!r}")
        timeout = self.limits.timeout(payload.get("timeout", 600.0))
        self._channel = (backend, timeout)
        workers, n = self.tensor_parallel * self.data_parallel, self.tensor_parallel
        with self.lock:
            ports = self._rpc("mmrlvr_channel_store",
                              lambda k: (self.host, timeout, workers, k * n, self.bucket_bytes)
                              if workers > 1 or self.bucket_bytes != weight_channel.BUCKET_BYTES else (self.host, timeout))
        self._port = next(int(p) for p in ports if p is not None)
        return {"port": self._port}

    def channel_join(self) -> dict:
        backend, timeout = getattr(self, "_channel", (None, None))
        if backend is None:
            raise ValueError("no weight channel is open: POST /weight_channel first")
        n = self.tensor_parallel
        with self.lock:
            self._rpc("mmrlvr_channel_join", lambda k: (backend, timeout, self.host)
                      if self.tensor_parallel * self.data_parallel == 1 else (backend, timeout, self.host, self._port, k * n))
        return {"joined": True}

    def update_from_channel(self, payload: dict) -> dict:
        spec = payload.get("spec")
        if not isinstance(spec, list) or not all(isinstance(e, list) and len(e) == 3 for e in spec):
            raise ValueError("spec: expected a list of [name, dtype, shape]")
        with self.lock:
            self.engine._wake()
            try:
                self._rpc("mmrlvr_channel_receive", lambda k: (spec,))
            except BaseException:
                self.broken = True
                raise
            self.engine.reset_caches()
            self.broken = False
            self.version += 1
            return {"version": self.version}

    def update_from_bytes(self, data: bytes) -> dict:
        d = upload_dir()
        try:
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(data)
            return self.update_from_dir(d)
        finally:
            _remove_dir(d)


def upload_dir() -> str:
    """A private directory in shared memory (else the temp dir) for one uploaded weights file."""
    return tempfile.mkdtemp(prefix="mmrlvr-upload-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


def _remove_dir(d: str) -> None:
    import shutil

    shutil.rmtree(d, ignore_errors=True)


def build_app(service: RolloutService, key: str):
    """The FastAPI app behind `Guard` (the key on every POST, the body limit)."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse

    app = FastAPI(title="mmrlvr rollout server")

    @app.exception_handler(BodyTooLarge)
    async def too_large(request, exc):
        return JSONResponse({"detail": str(exc)}, status_code=413)

    async def guarded(fn, *a):
        try:
            return await run_in_threadpool(fn, *a)
        except (ValueError, KeyError, TypeError) as exc:  # a malformed request: 400 with its one line
            raise HTTPException(status_code=400, detail=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    @app.get("/health")
    def health():
        return {"server": SERVER_NAME, "status": "ok", "version": service.version}

    @app.get("/info")
    def info():
        return service.info()

    @app.post("/generate")
    async def generate(request: Request):
        return await guarded(service.generate, await request.json())

    @app.post("/update_weights")
    async def update_weights(request: Request):
        body = await request.json()
        return await guarded(service.update_from_dir, str(body.get("path", "")))

    @app.post("/update_weights_upload")
    async def update_weights_upload(request: Request):
        d = upload_dir()  # streamed to the file, never held whole in memory; the guard stops it past the limit
        try:
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                async for chunk in request.stream():
                    f.write(chunk)
            return await guarded(service.update_from_dir, d)
        finally:
            _remove_dir(d)

    @app.post("/check_key")
    def check_key():
        return {"ok": True}  # reached only past the guard: the trainer's key is right

    @app.post("/weight_channel")
    async def weight_channel(request: Request):
        return await guarded(service.channel_store, await request.json())

    @app.post("/weight_channel/join")
    async def weight_channel_join():
        return await guarded(service.channel_join)

    @app.post("/update_weights_channel")
    async def update_weights_channel(request: Request):
        return await guarded(service.update_from_channel, await request.json())

    return Guard(app, key, service.limits.max_body)


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)


def key_for(args):
    """(key, file): --api-key, MMRLVR_ROLLOUT_KEY (file None), else generated and written to an owner-only
    file (its path printed). Beyond loopback the key must be given; the bind is then announced as a warning."""
    from mmrlvr.config import ConfigError

    key, explicit = server_key(args.api_key)
    why = bind_problem(args.host, explicit)
    if why:
        raise ConfigError(f"rollout-server: {why}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"mmrlvr rollout-server: warning: listening on {args.host}: any machine that reaches this port and "
              "holds the key can load weights into this server", file=sys.stderr, flush=True)
    if explicit:
        return key, None
    path = write_key_file(key, args.key_file or default_key_file(args.port))
    print(f"mmrlvr rollout-server: secret written to {path} (owner-only); give it to the trainer as "
          "rollout.server_key or MMRLVR_ROLLOUT_KEY", file=sys.stderr, flush=True)
    return key, path


def serve(args) -> int:
    """Build the engine, then serve until interrupted (loopback unless --host says otherwise)."""
    import uvicorn

    key, key_file = key_for(args)  # refused before the model loads
    engine = None
    try:
        engine = build_server_engine(args)
        limits = RequestLimits(max_n=args.max_n,
                               max_tokens=int(engine.llm.llm_engine.vllm_config.model_config.max_model_len),
                               max_images=args.max_images, max_timeout_s=args.max_channel_timeout,
                               max_body=int(args.max_body_mb * 2**20))
        service = RolloutService(engine, args.model, args.dtype, host=args.host, limits=limits,
                                 tensor_parallel=args.tensor_parallel_size, data_parallel=args.data_parallel_size,
                                 bucket_bytes=int(args.weight_bucket_mb * 2**20))
        app = build_app(service, key)
        layout = (f" ({args.data_parallel_size} x {args.tensor_parallel_size} devices: data x tensor parallel)"
                  if args.tensor_parallel_size * args.data_parallel_size > 1 else "")
        print(f"mmrlvr rollout-server: {args.model} on http://{args.host}:{args.port}{layout}", file=sys.stderr, flush=True)
        # uvicorn re-raises a SIGTERM it caught once it has shut down: exit through the `finally` below
        signal.signal(signal.SIGTERM, _exit_on_signal)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        if engine is not None:
            engine.close()  # data-parallel replicas: their processes stop with the server
        if key_file is not None:  # the generated key dies with the server: remove the file it wrote
            key_file.unlink(missing_ok=True)
    return 0
