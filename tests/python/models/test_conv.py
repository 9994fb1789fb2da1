"""torch.nn Conv1d and ConvTranspose2d (with PReLU) with strides, padding, dilation and groups, a
CNN run in channels_last (GroupNorm, a depthwise convolution, BatchNorm), and a
diffusion UNet's residual block (GroupNorm, SiLU, a skip connection), each in a small
network: training step and bf16 autocast against CPU."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from compare import Case, check_bf16_autocast, check_train_step


def conv1d_net():
    return nn.Sequential(
        nn.Conv1d(4, 8, kernel_size=3, stride=2, padding=1, groups=2),
        nn.ReLU(),
        nn.Conv1d(8, 6, kernel_size=3, dilation=2, padding=2, padding_mode="zeros"),
        nn.Tanh(),
        nn.Conv1d(6, 3, kernel_size=1, bias=False),
    )


def conv_transpose2d_net():
    return nn.Sequential(
        nn.ConvTranspose2d(6, 8, kernel_size=3, stride=2, padding=1, output_padding=1, groups=2),
        nn.PReLU(8),  # a slope per channel, as super-resolution upsamplers use it
        nn.ConvTranspose2d(8, 3, kernel_size=4, stride=1, padding=2, dilation=2),
    )


class ChannelsLastNet(nn.Module):
    """Weights and activations channels-last, as users run CNNs for speed."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, kernel_size=3, padding=1),
            nn.GroupNorm(2, 8),
            nn.SiLU(),
            nn.Conv2d(8, 8, kernel_size=3, padding=1, groups=8),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 3, kernel_size=1),
        )

    def forward(self, x):
        return self.body(x.contiguous(memory_format=torch.channels_last))


def channels_last_net():
    return ChannelsLastNet().to(memory_format=torch.channels_last)


class ResBlock(nn.Module):
    """A UNet residual block as diffusion models stack them: GroupNorm in contiguous
    layout (the engines' own kernel; channels_last above is left to the reference)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, 16, kernel_size=3, padding=1)
        self.block = nn.Sequential(
            nn.GroupNorm(4, 16), nn.SiLU(), nn.Conv2d(16, 16, kernel_size=3, padding=1),
            nn.GroupNorm(8, 16), nn.SiLU(), nn.Conv2d(16, 16, kernel_size=3, padding=1),
        )
        self.out = nn.Sequential(nn.GroupNorm(16, 16, affine=False), nn.Conv2d(16, 3, kernel_size=1))

    def forward(self, x):
        h = self.inp(x)
        return self.out(h + self.block(h))


def res_block_inputs(gen):
    return {"x": torch.randn(2, 3, 12, 12, generator=gen), "y": torch.randn(2, 3, 12, 12, generator=gen)}


def channels_last_inputs(gen):
    return {"x": torch.randn(2, 3, 10, 10, generator=gen), "y": torch.randn(2, 3, 10, 10, generator=gen)}


def conv1d_inputs(gen):
    return {"x": torch.randn(3, 4, 17, generator=gen), "y": torch.randn(3, 3, 9, generator=gen)}


def conv_transpose2d_inputs(gen):
    return {"x": torch.randn(2, 6, 5, 7, generator=gen), "y": torch.randn(2, 3, 12, 16, generator=gen)}


def loss(model, x):
    out = model(x["x"])
    return F.mse_loss(out.float(), x["y"]), out


CASES = [Case("conv1d", conv1d_net, conv1d_inputs, loss),
         Case("conv_transpose2d", conv_transpose2d_net, conv_transpose2d_inputs, loss),
         Case("channels_last", channels_last_net, channels_last_inputs, loss),
         Case("group_norm_res_block", ResBlock, res_block_inputs, loss)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_train_step_matches_cpu(device, case):
    check_train_step(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bf16_autocast_matches_cpu(device, case):
    check_bf16_autocast(case)
