"""The largest prefill batch one DP rank's scheduler forms with chunked prefill
disabled, from sglang's own ``PrefillAdder`` driven with synthetic requests.

Runs inside a probe process after ``runtime_context.publish``. The scheduler's
limits are those ``TpModelWorker.get_worker_info`` reports (``max_prefill_tokens``,
and ``max_req_len``: the longest sequence the scheduler keeps, an upper bound on
any request's fill, new or retracted) with an ample KV pool.
Without a chunk ``Scheduler.init_chunked_prefill`` turns mixed chunks off (the
rule is inlined: it needs a scheduler), so the adder gets no decode tokens.

KV memory is taken as ample (the memory budget admits everything): it can only
stop a batch earlier. Stand-ins: the tree cache, the KV allocator and its
memory budget, and the requests (plain objects with the fields admission reads).
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace
from unittest import mock

_AMPLE = 1 << 40


class _Budget:
    """A memory budget with room for everything (``PrefillBudget``'s interface)."""

    total_offset = 0
    remaining_total = _AMPLE
    remaining_current = _AMPLE
    load_back_needs_full_tokens = False

    def check_prefill(self, *, chunk_limit, **_):
        return True, chunk_limit

    def has_capacity(self):
        return True

    def reserve(self, *args, **kwargs):
        return None


def scheduler_limits(model_config) -> tuple[int, int]:
    """(max_prefill_tokens, max_req_len) as ``TpModelWorker.get_worker_info``
    reports them with an ample KV pool: the published max_prefill_tokens, and
    min(context_len - 1, kv_capacity - 1) (inlined: tp_worker imports
    setproctitle, which this venv lacks)."""
    from sglang.srt.runtime_context import get_schedule

    return get_schedule().max_prefill_tokens, model_config.context_len - 1


class _Request(SimpleNamespace):
    """A waiting request with no cached prefix, host hit or storage hit."""

    def needs_host_load_back(self):
        return False

    def fulfilled_storage_hit_len(self, prefix_len):
        return 0

    def materialized_host_hit_len(self):
        return 0


def _request(rid: int, length: int):
    return _Request(
        rid=rid,
        sampling_params=SimpleNamespace(max_new_tokens=1, ignore_eos=False),
        output_ids=[],
        full_untruncated_fill_ids=range(length),
        prefix_len=0,
        host_hit_length=0,
        swa_host_hit_length=0,
        auxiliary_swa_host_hit_length=0,
        mamba_host_hit_length=0,
        storage_hit_length=0,
        retracted_stain=False,
        last_node=None,
        cache_request_handle=None,
        kv=SimpleNamespace(holds_mamba=False, req_pool_idx=None),
    )


def _adder(max_prefill_tokens: int, page_size: int):
    from sglang.srt.managers.schedule_policy import PrefillAdder

    tree_cache = mock.MagicMock(name="tree_cache")
    tree_cache.supports_mamba.return_value = False
    tree_cache.supports_prefix_sharing.return_value = True
    allocator = mock.MagicMock(name="allocator")
    allocator.page_size = page_size
    allocator.create_prefill_budget.return_value = _Budget()
    allocator.request_slot_reserve.return_value = 0
    return PrefillAdder(
        page_size,
        tree_cache,
        allocator,
        None,
        1.0,
        max_prefill_tokens,
        None,  # chunked prefill disabled
        0,  # no mixed-chunk decode tokens without a chunk
    )


def _admits_whole(adder, length: int) -> bool:
    """Whether the adder's own admission takes a request of ``length`` tokens
    whole now (``_select_prefill_admission``, which commits nothing)."""
    from sglang.srt.managers.schedule_policy import AddReqResult

    admission = adder._select_prefill_admission(
        _request(len(adder.can_run_list), length),
        total_tokens=length + 1 + adder.per_req_token_overhead,
        host_hit_length=0,
        swa_host_hit_length=0,
        truncation_align_size=None,
    )
    return not isinstance(admission, AddReqResult) and admission.extend_len == length


def largest_batch(
    first: int, longest: int, max_prefill_tokens: int, page_size: int, max_requests: int, align: int
) -> int:
    """Rows of the batch the adder forms from a first request of ``first``
    tokens and then, each time, the longest request it still takes whole (in
    whole multiples of ``align`` tokens where that is not a single token), as
    ``Scheduler.get_new_batch_prefill`` offers them: it stops at the first result
    other than CONTINUE, and at ``max_requests`` admitted requests (the request
    pool, ``get_num_allocatable_reqs``)."""
    from sglang.srt.managers.schedule_policy import AddReqResult

    adder = _adder(max_prefill_tokens, page_size)
    length = first
    while length:
        req = _request(len(adder.can_run_list), length)
        result = adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        if result != AddReqResult.CONTINUE or len(adder.can_run_list) >= max_requests:
            break
        low, high = 0, longest
        while low < high:
            mid = (low + high + 1) // 2
            if _admits_whole(adder, mid):
                low = mid
            else:
                high = mid - 1
        length = low if low < align else low // align * align
    return sum(req.extend_end - req.prefix_len for req in adder.can_run_list)


def unchunked_prefill_tokens(model_config, page_size: int, max_requests: int) -> int:
    """The most tokens one prefill batch holds on a DP rank without a chunk."""
    max_prefill_tokens, longest = scheduler_limits(model_config)
    return _largest(max_prefill_tokens, longest, max(page_size or 1, 1), max_requests)


@cache
def _largest(max_prefill_tokens: int, longest: int, page_size: int, max_requests: int) -> int:
    firsts = {1, page_size, longest, longest // page_size * page_size}
    return max(
        largest_batch(f, longest, max_prefill_tokens, page_size, max_requests, align)
        for f in firsts
        if 0 < f <= longest
        for align in {1, page_size}
    )
