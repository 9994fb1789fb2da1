"""``torch.compile(model, backend="openreg")``: Inductor, as for the default backend.

PyTorch's convention for a device's own Dynamo backend is a name in Dynamo's registry
(``torch._dynamo.list_backends()``); on openreg it is Inductor itself, which generates
openreg code for graphs of openreg tensors (inductor.py). The default backend,
``"inductor"``, does the same.
"""


def openreg_backend(gm, example_inputs, **kwargs):
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, **kwargs)
