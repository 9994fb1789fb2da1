"""Real-model workloads: the model suite's families (tests/python/models) at sizes
where a step does real work, random weights, no downloads. bench/models.py and
bench/step_ops.py time them; ``python -m openreg tune`` measures the engines on
them. Models from transformers are skipped when it is not installed.

Each entry builds, for one device, a ``Workload``: ``train()`` runs one training
step (zero_grad, forward, loss, backward, AdamW) and ``infer()`` one forward pass
under ``torch.no_grad()`` in eval mode; both return a tensor to synchronise on.
The model, its inputs and its optimizer live on that device; the weights and
inputs are the same for every device (same seed).
"""

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn


@dataclass
class Workload:
    train: Callable[[], torch.Tensor]
    infer: Callable[[], torch.Tensor]


def workload(model, inputs, loss_fn, device, lr=1e-3):
    """A Workload of `model` (moved to `device`) on `inputs` (a dict of CPU tensors),
    with loss_fn(model, inputs_on_device) -> scalar tensor and AdamW."""
    model = model.to(device)
    inputs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def train():
        model.train()
        opt.zero_grad()
        loss = loss_fn(model, inputs)
        loss.backward()
        opt.step()
        return loss

    def infer():
        model.eval()
        with torch.no_grad():
            out = loss_fn(model, inputs)
        return out

    return Workload(train, infer)


def digits_cnn_model():
    """examples/train.py's model (the main job's), layer for layer: 8x8 digits, 10 classes.
    tests/python/test_workloads.py checks that the two stay the same."""
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10),
    )


def digits_cnn(device):
    g = torch.Generator().manual_seed(8)
    x = {"x": torch.rand(64, 1, 8, 8, generator=g), "y": torch.randint(0, 10, (64,), generator=g)}
    return workload(digits_cnn_model(), x, lambda m, x: nn.functional.cross_entropy(m(x["x"]), x["y"]), device,
                    lr=1e-2)


def _transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def gpt2_model(max_positions=128):
    """The suite's GPT-2: 2 layers, width 128, 4 heads, no dropout (bench/new_shapes.py
    trains it too, on longer sequences)."""
    tf = _transformers()
    return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=1000, n_positions=max_positions, n_embd=128, n_layer=2,
                                            n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def bert_model(max_positions=128):
    """The suite's BERT classifier: 2 layers, width 128, 4 heads, 4 labels, no dropout."""
    tf = _transformers()
    return tf.BertForSequenceClassification(tf.BertConfig(
        vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
        max_position_embeddings=max_positions, num_labels=4, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0))


def gpt2(device):
    model = gpt2_model()
    ids = torch.randint(0, 1000, (8, 64), generator=torch.Generator().manual_seed(1))
    return workload(model, {"ids": ids}, lambda m, x: m(input_ids=x["ids"], labels=x["ids"]).loss, device)


def bert(device):
    model = bert_model()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 1000, (8, 64), generator=g)
    lengths = torch.randint(16, 65, (8,), generator=g)
    mask = (torch.arange(64)[None, :] < lengths[:, None]).long()  # right padding
    ids = ids * mask
    labels = torch.randint(0, 4, (8,), generator=g)
    return workload(model, {"ids": ids, "mask": mask, "labels": labels},
                     lambda m, x: m(input_ids=x["ids"], attention_mask=x["mask"], labels=x["labels"]).loss, device)


def llama(device):
    tf = _transformers()
    cfg = tf.LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = tf.LlamaForCausalLM(cfg)
    ids = torch.randint(0, 1000, (8, 64), generator=torch.Generator().manual_seed(3))
    return workload(model, {"ids": ids}, lambda m, x: m(input_ids=x["ids"], labels=x["ids"]).loss, device)


def vit(device):
    tf = _transformers()
    cfg = tf.ViTConfig(image_size=64, patch_size=8, num_channels=3, hidden_size=192, num_hidden_layers=2,
                       num_attention_heads=3, intermediate_size=768, num_labels=10,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = tf.ViTForImageClassification(cfg)
    g = torch.Generator().manual_seed(4)
    x = {"pixels": torch.randn(8, 3, 64, 64, generator=g), "labels": torch.randint(0, 10, (8,), generator=g)}
    return workload(model, x, lambda m, x: m(pixel_values=x["pixels"], labels=x["labels"]).loss, device)


def resnet18(device):
    tf = _transformers()
    cfg = tf.ResNetConfig(num_channels=3, embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2],
                          layer_type="basic", hidden_act="relu", num_labels=10)
    model = tf.ResNetForImageClassification(cfg)
    g = torch.Generator().manual_seed(5)
    x = {"pixels": torch.randn(8, 3, 64, 64, generator=g), "labels": torch.randint(0, 10, (8,), generator=g)}
    return workload(model, x, lambda m, x: m(pixel_values=x["pixels"], labels=x["labels"]).loss, device)


def transformer_encoder(device):
    layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=384, dropout=0.0, batch_first=False)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(64, 8, 128, generator=g)  # (sequence, batch, width)
    target = torch.randn(64, 8, 128, generator=g)
    return workload(encoder, {"x": x, "target": target},
                     lambda m, x: nn.functional.mse_loss(m(x["x"]), x["target"]), device)


def lstm(device):
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(1000, 64)
            self.rnn = nn.LSTM(64, 128, num_layers=2, batch_first=True)
            self.head = nn.Linear(128, 1000)

        def forward(self, ids):
            return self.head(self.rnn(self.embed(ids))[0])

    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 1000, (8, 32), generator=g)
    return workload(Tagger(), {"ids": ids},
                     lambda m, x: nn.functional.cross_entropy(m(x["ids"]).flatten(0, 1), x["ids"].flatten()), device)


# name -> builder(device) -> Workload. The order is the table's.
MODELS = {
    "digits CNN": digits_cnn,
    "GPT-2": gpt2,
    "BERT": bert,
    "LLaMA": llama,
    "ViT": vit,
    "ResNet-18": resnet18,
    "nn.TransformerEncoder": transformer_encoder,
    "LSTM": lstm,
}

# What each model is, for the table's legend.
DESCRIPTIONS = {
    "digits CNN": "examples/train.py's model, batch 64 of 8x8",
    "GPT-2": "2 layers, width 128, 8x64 tokens",
    "BERT": "2 layers, width 128, 8x64 tokens, padding mask, classification",
    "LLaMA": "2 layers, width 128, GQA 4/2 heads, 8x64 tokens",
    "ViT": "2 layers, width 192, 8 images 64x64, patch 8",
    "ResNet-18": "8 images 64x64",
    "nn.TransformerEncoder": "2 layers, width 128, 64x8 sequence-first, MSE",
    "LSTM": "2 layers, width 128, 8x32 tokens",
}


TRANSFORMERS_MODELS = ("GPT-2", "BERT", "LLaMA", "ViT", "ResNet-18")


def available():
    """The names of MODELS that can be built here (transformers installed or not)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return [m for m in MODELS if m not in TRANSFORMERS_MODELS]
    return list(MODELS)


def build(name, device):
    """The named model's workload on ``device``, from seed 0 (same weights on every device)."""
    torch.manual_seed(0)
    return MODELS[name](device)
