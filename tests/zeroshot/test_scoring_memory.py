"""A scoring batch that does not fit on the device: one DeviceMemoryError line naming the batch and the
largest that fits, as the --max-batch-tokens that scores every request. The device's memory is simulated:
the forward raises torch.OutOfMemoryError above k padded tokens."""

from __future__ import annotations

import re

import pytest
import torch
from test_generate import make_model
from test_packed_scoring import multiple_choice_requests, nfeval_features_at

from nfeval.base.errors import DeviceMemoryError, UserError
from nfeval.model_adapters.scorer import score


def limited(features_at, k: int):
    def within(idx, *args, **kwargs):
        if idx.numel() > k:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return features_at(idx, *args, **kwargs)

    return within


def test_a_scoring_batch_that_does_not_fit_names_the_largest_that_does():
    model = make_model()
    reqs = multiple_choice_requests(max_len=40)
    kwargs = {"max_length": 40, "device": "cpu", "packed": False, "progress": False}
    with pytest.raises(DeviceMemoryError) as caught:
        score(limited(nfeval_features_at(model), 150), reqs, max_batch_tokens=4096, **kwargs)
    line = str(caught.value)
    assert isinstance(caught.value, UserError) and "\n" not in line
    rows, width = map(int, re.search(r"batch of (\d+) × (\d+) tokens", line).groups())
    fits = rows // 2
    while fits * width > 150:
        fits //= 2
    assert rows * width > 150 and fits > 0 and f"the largest that fits is {fits} × {width}" in line
    bound = int(re.search(r"--max-batch-tokens (\d+)", line).group(1))
    assert bound == fits * width
    got = score(limited(nfeval_features_at(model), 150), reqs, max_batch_tokens=bound, **kwargs)
    want = score(nfeval_features_at(model), reqs, max_batch_tokens=4096, **kwargs)
    assert [g for _, g in got] == [g for _, g in want]
    assert all(abs(a - b) < 1e-5 for (a, _), (b, _) in zip(got, want))
