"""Training loop of the default model: fixed seed, resumable safetensors checkpoints, progress bar, CPU or CUDA."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from tokenizers import Tokenizer
from tqdm import tqdm

from engine.tokens import InfillFormat
from engine.train.corpus import read_manifest, split
from engine.train.data import DataConfig, HoleDataset
from engine.train.model_config import SHAPES, ModelShape
from engine.train.objective import ObjectiveConfig, decoder_logits, loss_on_batch


@dataclass(frozen=True)
class TrainConfig:
    run_dir: str
    tokenizer_dir: str  # holds tokenizer.json and manifest.json (from engine.train.build_tokenizer)
    shape: ModelShape = field(default_factory=ModelShape)
    data: DataConfig = field(default_factory=DataConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    total_steps: int = 6000  # cosine decay length in steps; training may stop earlier or run on at min lr
    schedule_minutes: float = 0.0  # > 0: decay over this much training time instead (for a fixed wall-clock budget)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every_s: float = 480.0
    threads: int = 2
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.total_steps < 1 or self.warmup_steps < 0 or not 0 < self.min_lr_ratio <= 1:
            raise ValueError("lr > 0, total_steps >= 1, warmup_steps >= 0, min_lr_ratio in (0, 1]")
        # Sliding layers keep only the last `sliding_window` tokens: with a suffix-first context longer than that,
        # the suffix would reach the canvas through the full-attention layers only (REFERENCE §6).
        if self.shape.sliding_window < self.data.context_tokens + max(self.data.canvas_lengths):
            raise ValueError("sliding_window must cover the whole context plus the canvas")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict) -> TrainConfig:
        body = dict(body)
        body["shape"] = ModelShape(**body["shape"])
        data = dict(body["data"])
        data["canvas_lengths"] = tuple(data["canvas_lengths"])
        data["canvas_weights"] = tuple(data["canvas_weights"])
        body["data"] = DataConfig(**data)
        body["objective"] = ObjectiveConfig(**body["objective"])
        return cls(**body)

    def lr_at(self, step: int, elapsed_s: float = 0.0) -> float:
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.schedule_minutes > 0:
            p = min(1.0, elapsed_s / (self.schedule_minutes * 60))
        else:
            p = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def build_model(cfg: TrainConfig):
    from transformers import DiffusionGemmaForBlockDiffusion

    torch.manual_seed(cfg.seed)
    hf = cfg.shape.hf_config(canvas_length=max(cfg.data.canvas_lengths))
    return DiffusionGemmaForBlockDiffusion(hf).to(cfg.device)


def _optimizer(model, cfg: TrainConfig) -> torch.optim.AdamW:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "vision" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 and "vision" not in n]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )


def save_checkpoint(run: Path, model, opt, state: dict) -> None:
    """model.safetensors + optimizer.safetensors + state.json, written to a temp dir then renamed (atomic)."""
    tmp = run / "ckpt.tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    save_model(model, str(tmp / "model.safetensors"))
    tensors = {}
    for gi, group in enumerate(opt.param_groups):
        for pi, p in enumerate(group["params"]):
            for key, val in opt.state.get(p, {}).items():
                tensors[f"{gi}.{pi}.{key}"] = val.detach().cpu().reshape(-1) if val.dim() == 0 else val.cpu()
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    final = run / "ckpt"
    if final.exists():
        old = run / "ckpt.old"
        final.rename(old)
        tmp.rename(final)
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    else:
        tmp.rename(final)


def load_checkpoint(run: Path, model, opt) -> dict:
    ck = run / "ckpt"
    load_model(model, str(ck / "model.safetensors"), device=str(next(model.parameters()).device))
    tensors = load_file(str(ck / "optimizer.safetensors"))
    for gi, group in enumerate(opt.param_groups):
        for pi, p in enumerate(group["params"]):
            keys = [k for k in tensors if k.startswith(f"{gi}.{pi}.")]
            if keys:
                opt.state[p] = {k.split(".", 2)[2]: tensors[k].to(p.device) for k in keys}
                if "step" in opt.state[p]:
                    opt.state[p]["step"] = opt.state[p]["step"].reshape(())
    return json.loads((ck / "state.json").read_text())


@torch.no_grad()
def eval_loss(model, ds: HoleDataset, cfg: TrainConfig, batches: int = 6) -> dict[str, float]:
    """Held-out canvas loss with fixed noise, no self-conditioning; also bits per middle character, which compares
    across vocabularies."""
    model.eval()
    gen = torch.Generator(device=cfg.device).manual_seed(1234)
    nats, canvas_tokens, middle_nats, middle_chars = 0.0, 0, 0.0, 0
    for b in range(batches):
        batch = ds.batch(b)
        ctx, am, canvas = (t.to(cfg.device) for t in (batch.context, batch.attention_mask, batch.canvas))
        enc = model.model.encoder(input_ids=ctx, attention_mask=am, use_cache=True)
        from engine.train.objective import corrupt

        noisy = corrupt(canvas, model.config.text_config.vocab_size, cfg.objective.min_noise, gen)
        logits = decoder_logits(model, noisy, enc.cache, am, None)
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), canvas, reduction="none")  # (B, C)
        nats += ce.sum().item()
        canvas_tokens += ce.numel()
        for i in range(canvas.shape[0]):
            ids = canvas[i].tolist()
            n = ids.index(ds.fmt.eos_id) + 1
            middle_nats += ce[i, :n].sum().item()
            middle_chars += max(1, len(ds.tok.decode(ids[: n - 1])))
    model.train()
    return {"eval_loss": nats / canvas_tokens, "eval_bpc": middle_nats / middle_chars / math.log(2)}


def train(cfg: TrainConfig, minutes: float, resume: bool = True, quiet: bool = False,
          cpu_minutes: float | None = None) -> dict:
    """Train for `minutes` of wall time (or `cpu_minutes` of this process's CPU time, which compares recipes fairly
    on a shared machine), checkpointing every `cfg.checkpoint_every_s`; returns the final stats."""
    torch.set_num_threads(cfg.threads)
    run = Path(cfg.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(Path(cfg.tokenizer_dir) / "tokenizer.json"))
    if tok.get_vocab_size() != cfg.shape.vocab_size:
        raise ValueError(f"tokenizer has {tok.get_vocab_size()} ids, shape says {cfg.shape.vocab_size}")
    files = read_manifest(Path(cfg.tokenizer_dir) / "manifest.json")
    train_files, held = split(files)
    fmt = InfillFormat(canvas_lengths=cfg.data.canvas_lengths)
    ds = HoleDataset(train_files, tok, fmt, cfg.data, seed=cfg.seed)
    eval_ds = HoleDataset(held, tok, fmt, dataclasses.replace(cfg.data, batch_size=16), seed=cfg.seed + 99)
    model = build_model(cfg).train()
    opt = _optimizer(model, cfg)
    state = {"step": 0, "elapsed_s": 0.0, "cpu_s": 0.0, "tokens": 0, "canvas_tokens": 0}
    if resume and (run / "ckpt" / "state.json").exists():
        state = load_checkpoint(run, model, opt)
        print(f"resumed {run} at step {state['step']}")
    (run / "config.json").write_text(json.dumps(cfg.to_json(), indent=1))
    log = (run / "log.jsonl").open("a")
    t0, last_ckpt, c0 = time.time(), time.time(), time.process_time()
    start_elapsed, start_cpu = state["elapsed_s"], state.get("cpu_s", 0.0)
    deadline = t0 + minutes * 60
    bar = tqdm(initial=state["step"], desc=run.name, disable=quiet, dynamic_ncols=True, mininterval=5)
    ema = None
    # One worker thread builds batch step+1 while the model trains on step (tokenizers and torch release the GIL).
    loader = ThreadPoolExecutor(max_workers=1)
    pending = loader.submit(ds.batch, state["step"])
    while time.time() < deadline and (cpu_minutes is None or time.process_time() - c0 < cpu_minutes * 60):
        step = state["step"]
        gen = torch.Generator(device=cfg.device).manual_seed(cfg.seed * 7919 + step)
        batch = pending.result()
        pending = loader.submit(ds.batch, step + 1)
        ctx, am, canvas = (t.to(cfg.device) for t in (batch.context, batch.attention_mask, batch.canvas))
        lr = cfg.lr_at(step, state["elapsed_s"])
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.device.startswith("cuda")):
            loss, stats = loss_on_batch(model, ctx, am, canvas, cfg.objective, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        state["step"] = step + 1
        state["tokens"] += int(am.sum()) + canvas.numel() * cfg.objective.noise_draws
        state["canvas_tokens"] += canvas.numel() * cfg.objective.noise_draws
        state["elapsed_s"] = start_elapsed + time.time() - t0
        state["cpu_s"] = start_cpu + time.process_time() - c0
        ema = stats["canvas_loss"] if ema is None else 0.95 * ema + 0.05 * stats["canvas_loss"]
        tps = state["tokens"] / max(state["elapsed_s"], 1e-9)
        bar.update(1)
        bar.set_postfix(loss=f"{ema:.3f}", tok_s=f"{tps:.0f}", refresh=False)
        log.write(
            json.dumps(
                {
                    "step": state["step"],
                    "t": round(state["elapsed_s"], 1),
                    "loss": stats["canvas_loss"],
                    "ar": stats.get("ar_loss"),
                    "C": canvas.shape[1],
                    "tokens": state["tokens"],
                    "lr": lr,
                }
            )
            + "\n"
        )
        if state["step"] % 20 == 0:
            log.flush()
        if time.time() - last_ckpt > cfg.checkpoint_every_s:
            save_checkpoint(run, model, opt, state)
            log.flush()
            last_ckpt = time.time()
    bar.close()
    loader.shutdown(cancel_futures=True)
    result = dict(
        state,
        ema_loss=ema,
        tokens_per_s=state["tokens"] / max(state["elapsed_s"], 1e-9),
        canvas_tokens_per_s=state["canvas_tokens"] / max(state["elapsed_s"], 1e-9),
        tokens_per_cpu_s=state["tokens"] / max(state["cpu_s"], 1e-9),
        canvas_tokens_per_cpu_s=state["canvas_tokens"] / max(state["cpu_s"], 1e-9),
    )
    result.update(eval_loss(model, eval_ds, cfg))
    save_checkpoint(run, model, opt, state)
    log.write(json.dumps({"final": result}) + "\n")
    log.close()
    print(json.dumps(result))
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--minutes", type=float, default=10.0, help="stop (and checkpoint) after this long")
    ap.add_argument("--shape", default="base", choices=sorted(SHAPES))
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--context-tokens", type=int, default=128)
    ap.add_argument("--suffix-tokens", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--noise-draws", type=int, default=4)
    ap.add_argument("--ar-weight", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--total-steps", type=int, default=6000)
    ap.add_argument("--schedule-minutes", type=float, default=0.0, help="cosine decay over this training time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--checkpoint-every-s", type=float, default=480.0)
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args(argv)
    config_path = Path(args.run_dir) / "config.json"
    if config_path.exists() and not args.no_resume:
        cfg = TrainConfig.from_json(json.loads(config_path.read_text()))  # a resumed run keeps its recipe
    else:
        cfg = TrainConfig(
            run_dir=args.run_dir,
            tokenizer_dir=args.tokenizer_dir,
            shape=dataclasses.replace(SHAPES[args.shape], vocab_size=args.vocab_size),
            data=DataConfig(
                context_tokens=args.context_tokens, suffix_tokens=args.suffix_tokens, batch_size=args.batch_size
            ),
            objective=ObjectiveConfig(noise_draws=args.noise_draws, ar_weight=args.ar_weight),
            lr=args.lr,
            total_steps=args.total_steps,
            seed=args.seed,
            threads=args.threads,
            device=args.device,
            checkpoint_every_s=args.checkpoint_every_s,
        )
    train(cfg, args.minutes, resume=not args.no_resume)


if __name__ == "__main__":
    main()
