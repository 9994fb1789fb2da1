"""openreg's backend metadata (c10::BackendMeta): tags a device tensor carries.

PyTorch's API: torch._C._set_tensor_metadata(t, {"openreg.<name>": True}) and
torch._C._get_tensor_metadata(t), the same map torch.save stores with a tensor.
The expected tags are the ones each test sets; values are checked against CPU.
"""

import copy
import io

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

get_meta = torch._C._get_tensor_metadata
set_meta = torch._C._set_tensor_metadata
TAGS = {"openreg.nhwc": True, "openreg.pinned_weights": True}


def tagged(device, *shape, tags=TAGS):
    torch.manual_seed(0)
    cpu = torch.randn(*shape)
    t = cpu.to(device)
    set_meta(t, dict(tags))
    return t, cpu


def test_set_and_get(device):
    t, _ = tagged(device, 3)
    assert get_meta(t) == TAGS
    # Keys outside "openreg." are PyTorch's or another backend's: not kept.
    set_meta(t, {"other_backend.flag": True})
    assert get_meta(t) == TAGS
    # False clears a tag; the others stay.
    set_meta(t, {"openreg.nhwc": False})
    assert get_meta(t) == {"openreg.pinned_weights": True}
    assert get_meta(torch.zeros(2, device=device)) == {}


def test_cpu_tensors_carry_none_as_in_pytorch(device):
    # A backend without BackendMeta functions (CPU) ignores such keys.
    cpu = torch.zeros(2)
    set_meta(cpu, dict(TAGS))
    assert get_meta(cpu) == {}
    t, _ = tagged(device, 2)
    assert get_meta(t.cpu()) == {}


def test_pytorch_metadata_keys_still_work(device):
    # conj/neg are PyTorch's own keys in the same map: both kinds travel together.
    z = torch.randn(3, dtype=torch.complex64).to(device)
    set_meta(z, {"conj": True, "openreg.nhwc": True})
    assert z.is_conj()
    assert get_meta(z) == {"conj": True, "openreg.nhwc": True}


@pytest.mark.parametrize(
    "copy",
    [
        lambda t: t.clone(),
        lambda t: t.to("openreg:1"),
        lambda t: torch.empty_like(t).copy_(t),
        lambda t: torch.empty(t.shape, device="openreg:1").copy_(t),
        lambda t: t.detach(),
        lambda t: t.data,
        lambda t: torch.nn.Parameter(t),
        lambda t: copy.deepcopy(torch.nn.Parameter(t)),
    ],
    ids=["clone", "to_other_device", "copy_", "copy_across_devices", "detach", "data", "Parameter", "deepcopy_Parameter"],
)
def test_copies_carry_the_tags(device, copy):
    t, cpu = tagged(device, 4, 5)
    out = copy(t)
    assert get_meta(out) == TAGS
    torch.testing.assert_close(out.detach().cpu(), cpu, atol=0, rtol=0)
    assert get_meta(t) == TAGS


def test_tags_are_per_tensor_after_a_copy(device):
    t, _ = tagged(device, 3)
    for other in (t.clone(), t.detach()):
        set_meta(other, {"openreg.nhwc": False})
        assert get_meta(other) == {"openreg.pinned_weights": True}
        assert get_meta(t) == TAGS


def test_copy_from_an_untagged_source_keeps_the_destinations_tags(device):
    # As when loading CPU weights into a tagged parameter, or when functionalization
    # writes a mutation back into an input.
    t, _ = tagged(device, 3)
    src = torch.tensor([1.0, 2.0, 3.0])
    t.copy_(src)
    assert get_meta(t) == TAGS
    t.copy_(src.to(device))
    assert get_meta(t) == TAGS
    torch.testing.assert_close(t.cpu(), src)


def test_a_tagged_source_replaces_the_destinations_tags(device):
    dst, _ = tagged(device, 3, tags={"openreg.old": True})
    src, cpu = tagged(device, 3)
    dst.copy_(src)
    assert get_meta(dst) == TAGS
    torch.testing.assert_close(dst.cpu(), cpu)


def test_module_to_another_device_keeps_parameter_tags(device):
    lin = torch.nn.Linear(4, 2).to(device)
    set_meta(lin.weight, dict(TAGS))
    weight = lin.weight.detach().cpu()
    lin.to("openreg:1")
    assert lin.weight.device == torch.device("openreg:1")
    assert get_meta(lin.weight) == TAGS
    torch.testing.assert_close(lin.weight.detach().cpu(), weight)


@pytest.mark.parametrize("map_location", ["openreg", "openreg:1", None])
def test_save_and_load(device, map_location):
    t, cpu = tagged(device, 4, 5)
    buf = io.BytesIO()
    torch.save({"t": t, "plain": torch.ones(2, device=device)}, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location=map_location)
    assert loaded["t"].device.type == "openreg"
    assert get_meta(loaded["t"]) == TAGS
    assert get_meta(loaded["plain"]) == {}
    torch.testing.assert_close(loaded["t"].cpu(), cpu, atol=0, rtol=0)


def test_load_to_cpu_drops_the_tags(device):
    t, cpu = tagged(device, 3)
    buf = io.BytesIO()
    torch.save(t, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="cpu")
    assert get_meta(loaded) == {}
    torch.testing.assert_close(loaded, cpu, atol=0, rtol=0)


def test_state_dict_round_trip(device):
    lin = torch.nn.Linear(4, 2).to(device)
    set_meta(lin.weight, dict(TAGS))
    buf = io.BytesIO()
    torch.save(lin.state_dict(), buf)
    buf.seek(0)
    fresh = torch.nn.Linear(4, 2).to(device)
    fresh.load_state_dict(torch.load(buf, map_location="openreg"))
    assert get_meta(fresh.weight) == TAGS
    assert get_meta(fresh.bias) == {}
    torch.testing.assert_close(fresh.weight.detach().cpu(), lin.weight.detach().cpu())


def test_fake_tensor_conversion_keeps_the_tags(device):
    t, _ = tagged(device, 4, 5)
    fake = FakeTensorMode().from_tensor(t)
    assert fake.device == t.device
    assert get_meta(fake) == TAGS


def test_compile_traces_with_the_tags(device):
    # Dynamo traces with FakeTensors: the graph's placeholders carry the tags.
    t, cpu = tagged(device, 4, 5)
    traced = []

    def backend(gm, example_inputs):
        traced.extend(
            get_meta(node.meta["example_value"]) for node in gm.graph.nodes if node.op == "placeholder"
        )
        return gm

    out = torch.compile(lambda x: x * 2, backend=backend)(t)
    assert traced == [TAGS]
    torch.testing.assert_close(out.cpu(), cpu * 2)


def test_functionalize(device):
    t, cpu = tagged(device, 4, 5)
    seen = {}

    def f(x):
        seen["input"] = get_meta(x)
        c = x.clone()
        seen["clone"] = get_meta(c)
        x.add_(1)  # a mutation, written back into the input
        seen["mutated"] = get_meta(x)
        return c * 2, c

    doubled, copied = torch.func.functionalize(f)(t)
    assert seen == {"input": TAGS, "clone": TAGS, "mutated": TAGS}
    assert get_meta(copied) == TAGS
    assert get_meta(doubled) == {}  # a computed tensor, not a copy
    assert get_meta(t) == TAGS
    torch.testing.assert_close(t.cpu(), cpu + 1)
    torch.testing.assert_close(copied.cpu(), cpu)
    torch.testing.assert_close(doubled.cpu(), cpu * 2)
