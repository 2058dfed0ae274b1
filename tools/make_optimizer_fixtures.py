#!/usr/bin/python3
"""Writes tests/optim/optimizer_fixtures.inc: a few steps of every server optimizer,
computed in float64 from MXNet 1.9.1's published update formulas (python/mxnet/optimizer/
optimizer.py, src/operator/optimizer_op-inl.h, src/operator/contrib/adamw-inl.h), written
here independently of Tally's C++. tests/optim/optimizer_fixtures_test.cc runs the Updater
on the same inputs and compares weights and every state slot.

    /usr/bin/python3 tools/make_optimizer_fixtures.py [--out tests/optim/optimizer_fixtures.inc]

Inputs: N elements, STEPS steps, w0[i] = 0.6 sin(i + 1) + 0.1 (i mod 3),
g_t[i] = 0.8 cos(1.3 i + 0.7 t) + 0.05 t (t = 1..STEPS), the lr halved from step 3 on (so
LARS's momentum correction acts). "fp16" cases: the weight is float16 with a float64 master
(MXNet's multi_precision wrapper: the rule on the master, the weight its float16 rounding),
w0 and the gradients rounded to float16 first, LARS's weight norm taken of the float16 weight.
"""
import argparse
import math

import numpy as np

N, STEPS = 7, 4


def inputs(fp16):
    i = np.arange(N, dtype=np.float64)
    w0 = 0.6 * np.sin(i + 1) + 0.1 * (i % 3)
    grads = [0.8 * np.cos(1.3 * i + 0.7 * t) + 0.05 * t for t in range(1, STEPS + 1)]
    if fp16:
        w0 = w0.astype(np.float16).astype(np.float64)
        grads = [g.astype(np.float16).astype(np.float64) for g in grads]
    return w0, grads


def lrs(lr):
    return [lr if t < 3 else lr / 2 for t in range(1, STEPS + 1)]


def clip(x, c):
    return np.clip(x, -c, c) if c > 0 else x


def sgn(x):
    return (x > 0).astype(np.float64) - (x < 0).astype(np.float64)


# Each rule: (p, state, w, g, lr, t, stored_w) -> new w; state is a dict of arrays/scalars.
def adam(p, s, w, g, lr, t, _):
    gr = clip(g * p["rescale_grad"] + w * p["wd"], p["clip_gradient"])
    s["mean"] = p["beta1"] * s["mean"] + (1 - p["beta1"]) * gr
    s["var"] = p["beta2"] * s["var"] + (1 - p["beta2"]) * gr * gr
    lr_t = lr * math.sqrt(1 - p["beta2"] ** t) / (1 - p["beta1"] ** t)
    return w - lr_t * s["mean"] / (np.sqrt(s["var"]) + p["epsilon"])


def adamw(p, s, w, g, lr, t, _):
    gr = clip(p["rescale_grad"] * g, p["clip_gradient"])
    s["mean"] = p["beta1"] * s["mean"] + (1 - p["beta1"]) * gr
    s["var"] = p["beta2"] * s["var"] + (1 - p["beta2"]) * gr ** 2
    return w - p["eta"] * (lr * s["mean"] / (np.sqrt(s["var"]) + p["epsilon"]) + p["wd"] * w)


def adagrad(p, s, w, g, lr, t, _):
    gr = clip(g * p["rescale_grad"], p["clip_gradient"])
    s["history"] = s["history"] + gr ** 2
    return w - lr * (gr / np.sqrt(s["history"] + p["epsilon"]) + w * p["wd"])


def rmsprop(p, s, w, g, lr, t, _):
    gr = clip(p["rescale_grad"] * g + p["wd"] * w, p["clip_gradient"])
    g1 = p["gamma1"]
    s["n"] = (1 - g1) * gr ** 2 + g1 * s["n"]
    if not p["centered"]:
        nw = w - lr * gr / np.sqrt(s["n"] + p["epsilon"])
    else:
        s["g"] = (1 - g1) * gr + g1 * s["g"]
        s["delta"] = p["gamma2"] * s["delta"] - lr * gr / np.sqrt(s["n"] - s["g"] ** 2 + p["epsilon"])
        nw = w + s["delta"]
    return clip(nw, p["clip_weights"])


def signum(p, s, w, g, lr, t, _):
    if p["momentum"] == 0:  # signsgd_update
        return (1 - lr * p["wd"]) * w - lr * sgn(g)
    m = p["momentum"]
    s["mom"] = m * s["mom"] - (1 - m) * p["wd"] * w - (1 - m) * clip(p["rescale_grad"] * g, p["clip_gradient"])
    return (1 - lr * p["wd_lh"]) * w + lr * sgn(s["mom"])


def lars(p, s, w, g, lr, t, stored_w):
    w_norm = np.linalg.norm(stored_w)
    g_norm = np.linalg.norm(g) * p["rescale_grad"]
    lr_l = lr * p["eta"] * w_norm / (g_norm + p["wd"] * w_norm + p["epsilon"]) if w_norm > 0 and g_norm > 0 else lr
    m = p["momentum"]
    gr = clip(p["rescale_grad"] * g, p["clip_gradient"])
    if m == 0:
        return w - lr_l * (gr + p["wd"] * w)
    if p["momentum_correction"] and s["last_lr"] != 0:
        m = m * lr / s["last_lr"]
    s["last_lr"] = lr
    s["mom"] = m * s["mom"] - lr_l * (gr + p["wd"] * w)
    return w + s["mom"]


def lamb(p, s, w, g, lr, t, _):
    gr = clip(g * p["rescale_grad"], p["clip_gradient"])
    s["mean"] = p["beta1"] * s["mean"] + (1 - p["beta1"]) * gr
    s["var"] = p["beta2"] * s["var"] + (1 - p["beta2"]) * gr ** 2
    mh, vh = s["mean"], s["var"]
    if p["bias_correction"]:
        mh, vh = mh / (1 - p["beta1"] ** t), vh / (1 - p["beta2"] ** t)
    u = mh / (np.sqrt(vh) + p["epsilon"]) + p["wd"] * w
    r1, r2 = np.linalg.norm(w), np.linalg.norm(u)
    if p["lower_bound"] > 0:
        r1 = max(r1, p["lower_bound"])
    if p["upper_bound"] > 0:
        r1 = min(r1, p["upper_bound"])
    ratio = 1.0 if r1 == 0 or r2 == 0 else r1 / r2
    return w - lr * ratio * u


RULES = {"adam": adam, "adamw": adamw, "adagrad": adagrad, "rmsprop": rmsprop, "signum": signum, "lars": lars,
         "lamb": lamb}
DEFAULT_EPS = {"adam": 1e-8, "adamw": 1e-8, "rmsprop": 1e-8, "adagrad": 1e-7, "lamb": 1e-6, "lars": 0.0}
BASE = dict(momentum=0.9, wd=1e-2, rescale_grad=0.5, clip_gradient=-1.0, beta1=0.9, beta2=0.999, epsilon=-1.0,
            gamma1=0.9, gamma2=0.9, centered=False, clip_weights=-1.0, eta=-1.0, momentum_correction=True,
            wd_lh=0.0, lower_bound=-1.0, upper_bound=-1.0, bias_correction=True)

# (name, type, lr, overrides)
CASES = [
    ("adam", "adam", 0.05, {}),
    ("adam_clip_eps", "adam", 0.05, dict(clip_gradient=0.3, epsilon=1e-3)),
    ("adamw", "adamw", 0.05, dict(eta=0.5, wd=0.1)),
    ("adagrad", "adagrad", 0.1, {}),
    ("adagrad_eps", "adagrad", 0.1, dict(epsilon=0.05, clip_gradient=0.35)),
    ("rmsprop", "rmsprop", 0.02, dict(epsilon=1e-3)),
    ("rmsprop_centered", "rmsprop", 0.02, dict(centered=True, gamma1=0.95, gamma2=0.8, clip_weights=0.55,
                                               epsilon=1e-2)),
    ("signum", "signum", 0.01, dict(wd_lh=0.05, clip_gradient=0.3)),
    ("signsgd", "signum", 0.01, dict(momentum=0.0)),
    ("lars", "lars", 0.5, dict(eta=0.02, epsilon=1e-3)),
    ("lars_no_correction", "lars", 0.5, dict(eta=0.02, momentum_correction=False, clip_gradient=0.3)),
    ("lars_no_momentum", "lars", 0.5, dict(momentum=0.0)),
    ("lamb", "lamb", 0.05, {}),
    ("lamb_bounds", "lamb", 0.05, dict(upper_bound=0.8, lower_bound=0.1, bias_correction=False, epsilon=1e-3)),
]


def slot_names(typ, p):
    if typ in ("adam", "lamb"):
        return ["mean", "var", "count"]
    if typ == "adamw":
        return ["mean", "var"]
    if typ == "adagrad":
        return ["history"]
    if typ == "rmsprop":
        return ["n", "g", "delta"] if p["centered"] else ["n"]
    if typ == "signum":
        return ["mom"] if p["momentum"] > 0 else []
    if typ == "lars":
        if p["momentum"] == 0:
            return []
        return ["mom", "last_lr"] if p["momentum_correction"] else ["mom"]
    raise ValueError(typ)


def run(typ, lr, p, fp16):
    q = dict(p)
    if q["epsilon"] < 0:
        q["epsilon"] = DEFAULT_EPS.get(typ, 0.0)
    if q["eta"] < 0:
        q["eta"] = 0.001 if typ == "lars" else 1.0
    w0, grads = inputs(fp16)
    s = {k: np.zeros(N) for k in ("mean", "var", "history", "n", "g", "delta", "mom")}
    s["last_lr"], s["count"] = 0.0, 0
    w = w0.copy()
    stored = w0.copy()
    weights = []
    for t, (g, lr_t) in enumerate(zip(grads, lrs(lr)), start=1):
        w = RULES[typ](q, s, w, g, lr_t, t, stored)
        s["count"] = t
        stored = w.astype(np.float16).astype(np.float64) if fp16 else w
        weights.append(stored)
    slots = [np.full(N, float(s[k])) if k in ("count", "last_lr") else s[k] for k in slot_names(typ, q)]
    return w0, grads, weights, slots


def floats(v):
    return "{" + ", ".join("%.17g" % x for x in v) + "}"


def config_lambda(typ, lr, p):
    fields = ["c.type = \"%s\";" % typ, "c.lr = %.9g;" % lr]
    for k, v in p.items():  # every field: the C++ defaults are not BASE's
        fields.append("c.%s = %s;" % (k, ("true" if v else "false") if isinstance(v, bool) else "%.9g" % v))
    return "[] { OptimizerConfig c; " + " ".join(fields) + " return c; }"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/optim/optimizer_fixtures.inc")
    out = []
    args = ap.parse_args()
    out.append("// Generated by tools/make_optimizer_fixtures.py (float64, MXNet 1.9.1's formulas); do not edit.")
    out.append("// {name, fp16, config, lrs, w0, grads per step, weights after each step, state slots after the last}")
    for name, typ, lr, over in CASES:
        p = dict(BASE, **over)
        for fp16 in (False, True):
            w0, grads, weights, slots = run(typ, lr, p, fp16)
            out.append("{\"%s%s\", %s, %s," % (name, "_fp16" if fp16 else "", "true" if fp16 else "false",
                                               config_lambda(typ, lr, p)))
            out.append(" %s, %s," % (floats(lrs(lr)), floats(w0)))
            out.append(" {%s}," % ", ".join(floats(g) for g in grads))
            out.append(" {%s}," % ", ".join(floats(w) for w in weights))
            out.append(" {%s}}," % ", ".join(floats(v) for v in slots))
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
