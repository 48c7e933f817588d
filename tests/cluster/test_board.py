"""The board a node's workers share: a queue's mark moves when another worker stirs
it, seen across processes without a call."""

from __future__ import annotations

import os

from dynamiq.cluster.board import Board


def test_a_stir_in_one_worker_moves_the_mark_the_others_read() -> None:
    first, second = Board.shared(2)
    before = first.mark("orders"), second.mark("orders"), first.mark("invoices")
    pid = os.fork()
    if pid == 0:  # the second worker's process
        second.stir("orders")
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert first.mark("orders") == before[0] + 1
    assert second.mark("orders") == before[1]  # its own stir is no news to it
    first.stir("orders")
    assert second.mark("orders") == before[1] + 1
    assert first.mark("orders") == before[0] + 1
    assert first.mark("invoices") == before[2]  # another queue's mark stays


def test_queues_that_share_a_counter_only_cost_an_ask() -> None:
    first, second = Board.shared(2, slots=1)  # every queue on one counter
    mark = first.mark("a")
    second.stir("b")
    assert first.mark("a") == mark + 1  # "a" looks stirred: its peers are asked again
