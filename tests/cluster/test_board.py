"""The board a node's workers share: a queue's mark moves when any worker stirs it,
seen across processes without a call."""

from __future__ import annotations

import os

from dynamiq.cluster.board import Board


def test_a_stir_in_one_worker_moves_the_mark_every_worker_reads() -> None:
    first, second = Board.shared(2)
    before = first.mark("orders"), second.mark("orders"), first.mark("invoices")
    pid = os.fork()
    if pid == 0:  # the second worker's process
        second.stir("orders")
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert first.mark("orders") == second.mark("orders") == before[0] + 1
    first.stir("orders")
    assert second.mark("orders") == before[1] + 2
    assert first.mark("invoices") == before[2]  # another queue's mark stays


def test_queues_that_share_a_counter_only_cost_an_ask() -> None:
    (board,) = Board.shared(1, slots=1)  # every queue on one counter
    mark = board.mark("a")
    board.stir("b")
    assert board.mark("a") == mark + 1  # "a" looks stirred: its peers are asked again
