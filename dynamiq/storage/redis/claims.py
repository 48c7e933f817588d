"""The Redis store's claimed inserts (``StorageBackend.insert_claimed``).

A claim lives in its home shard, ``dq:{<bucket>:<home>}:c:<claim key>``, a
string the server expires after the window. An object in that shard and its
claim are one script: atomic, on one server and in a Cluster.

An object in another shard (a queue-wide deduplication id of a message kept
in its group's stripe) cannot share a script with its claim. It is stored
out of sight (in its shard's hash, not in the sorted set that walks read),
then claimed, with a note beside the claim of where the object lies
(``...:n:<claim key>``, expiring with the claim), then shown (added to the
sorted set); when the claim was held, the hidden object is deleted again. So
a receive never meets a copy that loses its claim a moment later.

A publisher that dies between its claim and the showing leaves its object
hidden: the next publish of that claim, finding it held, shows the object
the note names before it answers with the claim's value, so the first copy
is delivered, not lost (both ways to insert do this). One that dies between
hiding and claiming leaves a hidden object that nothing claims: never
delivered nor counted in the depth (``count`` reads the sorted sets), gone
with its bucket; its publish was not acknowledged, and its retry stores the
message again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from dynamiq.storage.base import Claimed, claim_record, claim_value
from dynamiq.storage.redis.layout import (
    SHARD_SHIFT,
    Command,
    by_bucket_shard,
    member,
    scatter,
    script_keys,
    shard_keys,
)
from dynamiq.storage.redis.scripts import CLAIM, DELETE, HIDE, INSERT_CLAIMED, SHOW, Lua

__all__ = ["ClaimedInserts"]

# Runs commands, one pipeline per server (``write``: they change the store).
Run = Callable[[Sequence[Command], bool], Awaitable[list[Any]]]
# Per object: True stored and claimed, False its id taken, bytes the live claim's value.
Answer = bool | bytes


class ClaimedInserts:
    """Objects inserted with their claims, beside them or across shards."""

    def __init__(self, run: Run) -> None:
        self._run = run

    async def insert(self, items: Sequence[Claimed], now_ms: int) -> list[Answer]:
        """Insert objects with their claims; per item, as ``insert_claimed`` answers."""
        across = [i for i, item in enumerate(items) if item[1] >> SHARD_SHIFT != item[6]]
        if not across:
            return await self._beside(items, now_ms)
        beside = sorted(set(range(len(items))).difference(across))
        out: list[Answer] = [False] * len(items)
        for idx, answers in (
            (beside, await self._beside([items[i] for i in beside], now_ms)),
            (across, await self._across([items[i] for i in across], now_ms)),
        ):
            for i, answer in zip(idx, answers, strict=True):
                out[i] = answer
        return out

    async def _beside(self, items: Sequence[Claimed], now_ms: int) -> list[Answer]:
        """Objects in their claims' home shards: each with its claim, one script per shard."""
        if not items:
            return []
        groups = by_bucket_shard(items)

        def command(bucket: str, shard: int, idx: list[int]) -> Command:
            keys = script_keys(bucket, shard)
            h = keys[0]
            args: list[bytes | int | str] = [now_ms]
            for i in idx:
                keys += _claim_keys(items[i])
                _, key, value, _, claimed_as, expires_ms, _ = items[i]
                record = claim_record(claimed_as, expires_ms)
                args += [member(key), value, record, max(1, expires_ms - now_ms)]
            return h, INSERT_CLAIMED.call(keys, args)

        results = await self._run([command(b, s, idx) for (b, s), idx in groups.items()], True)
        answers = scatter(len(items), groups.values(), results, lambda a: a)
        return await self._settled(items, answers, [])

    async def _across(self, items: Sequence[Claimed], now_ms: int) -> list[Answer]:
        """Objects outside their claims' home shards: hidden, claimed, then shown."""
        groups = by_bucket_shard(items)

        def hide(bucket: str, shard: int, idx: list[int]) -> Command:
            h, z = shard_keys(bucket, shard)
            args = [v for i in idx for v in (member(items[i][1]), items[i][2])]
            return h, HIDE.call([h, z], args)

        results = await self._run([hide(b, s, idx) for (b, s), idx in groups.items()], True)
        hidden = scatter(len(items), groups.values(), results, bool)
        todo = [i for i, ok in enumerate(hidden) if ok]

        def claim(item: Claimed) -> Command:
            keys = _claim_keys(item)
            args = [now_ms, claim_record(item[4], item[5]), max(1, item[5] - now_ms)]
            args.append(member(item[1]).encode())
            return keys[0], CLAIM.call(keys, args)

        claimed = await self._run([claim(items[i]) for i in todo], True)
        answers: list[Any] = [0] * len(items)
        for i, answer in zip(todo, claimed, strict=True):
            answers[i] = answer
        mine = [(items[i][0], items[i][1]) for i, a in zip(todo, claimed, strict=True) if a == 1]
        return await self._settled(items, answers, mine, lost=todo)

    async def _settled(
        self,
        items: Sequence[Claimed],
        answers: Sequence[Any],
        mine: list[tuple[str, int]],
        lost: Sequence[int] = (),
    ) -> list[Answer]:
        """Read the scripts' answers; show what must be seen (objects this call claimed,
        ``mine``, and the hidden objects that held claims' notes name) and delete the
        hidden objects (of ``lost``) whose claims were held."""
        out: list[Answer] = []
        shown = list(mine)
        gone: list[tuple[str, int]] = []
        held = set(lost)
        for i, answer in enumerate(answers):
            if isinstance(answer, list):  # held: the claim's record and note
                record, note = answer
                out.append(claim_value(record))
                if note:
                    shown.append((items[i][0], int(note, 16)))
                if i in held:
                    gone.append((items[i][0], items[i][1]))
            else:
                out.append(answer == 1)
        await self._each_shard(shown, SHOW)
        await self._each_shard(gone, DELETE)
        return out

    async def _each_shard(self, objects: list[tuple[str, int]], script: Lua) -> None:
        """Run a script of members on each shard the ``(bucket, key)`` objects are in."""
        if not objects:
            return
        groups = by_bucket_shard(objects)

        def command(bucket: str, shard: int, idx: list[int]) -> Command:
            keys = script_keys(bucket, shard)
            args = [member(objects[i][1]) for i in idx]
            return keys[0], script.call(keys, args)

        await self._run([command(b, s, idx) for (b, s), idx in groups.items()], True)


def _claim_keys(item: Claimed) -> list[str]:
    """Where a claim and its note live: beside the objects of its home shard."""
    tag = f"dq:{{{item[0]}:{item[6]}}}"
    return [f"{tag}:c:{item[3]}", f"{tag}:n:{item[3]}"]
