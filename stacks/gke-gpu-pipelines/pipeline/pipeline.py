"""The gke-gpu-pipelines stack's pipeline, in the shape of the Kubeflow Pipelines
codelab: a preprocessing step on the default (CPU) pool, then a training step with one
NVIDIA T4 on the preemptible GPU pool, tolerating its taint and retried when a
preemption kills it. Its model is an output artifact: it lands under the pipeline root,
in the stack's bucket.

    python3 pipeline.py [OUT]   # compiles to OUT (default: pipeline.yaml beside this)
"""

import pathlib
import sys

from kfp import compiler, dsl, kubernetes


@dsl.component(base_image="python:3.11")
def preprocess(rows: int, dataset: dsl.Output[dsl.Dataset]):
    """Writes `rows` rows of 8 features and a label (the features' sign), seeded."""
    import random

    rng = random.Random(0)
    with open(dataset.path, "w") as f:
        for _ in range(rows):
            x = [rng.uniform(-1, 1) for _ in range(8)]
            label = 1 if sum(x) > 0 else 0
            f.write(",".join(f"{v:.6f}" for v in x) + f",{label}\n")


@dsl.component(base_image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime")
def train(dataset: dsl.Input[dsl.Dataset], epochs: int, model: dsl.Output[dsl.Model]):
    """Fits a linear classifier to the dataset on the GPU and saves its weights."""
    import torch

    assert torch.cuda.is_available(), "no GPU visible: is the NVIDIA driver installed?"
    dev = torch.device("cuda")
    print("training on", torch.cuda.get_device_name(0))
    with open(dataset.path) as f:
        rows = [[float(v) for v in line.split(",")] for line in f if line.strip()]
    data = torch.tensor(rows, device=dev)
    x, y = data[:, :-1], data[:, -1].long()
    net = torch.nn.Linear(x.shape[1], 2).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    for epoch in range(epochs):
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    torch.save(net.state_dict(), model.path)


@dsl.pipeline(name="gpu-training")
def gpu_training(rows: int = 1000, epochs: int = 3, gpus: int = 1):
    prep = preprocess(rows=rows)
    step = train(dataset=prep.outputs["dataset"], epochs=epochs)
    step.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(gpus)
    # The stack's preemptible T4 pool, whose taint (preemptible=true:NoSchedule) keeps
    # everything else off it.
    kubernetes.add_node_selector(step, "cloud.google.com/gke-accelerator", "nvidia-tesla-t4")
    kubernetes.add_node_selector(step, "cloud.google.com/gke-nodepool", "preemptible-gpu-pool")
    kubernetes.add_toleration(
        step, key="preemptible", operator="Equal", value="true", effect="NoSchedule"
    )
    # A preemption kills the pod: run it again (the codelab's set_retry(5)), and really
    # train each time rather than reuse a cached result.
    step.set_retry(num_retries=5)
    step.set_caching_options(False)


if __name__ == "__main__":
    default = pathlib.Path(__file__).with_name("pipeline.yaml")
    out = sys.argv[1] if len(sys.argv) > 1 else default
    compiler.Compiler().compile(gpu_training, str(out))
