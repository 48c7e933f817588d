"""The AWS query protocol: form-encoded parameters in, XML out (pure).

Older SDKs speak it to SQS, and every SDK speaks it to SNS. A request's
form names nest with dots: ``Attribute.1.Name``, ``Entries.member.2.Id``,
``Attributes.entry.1.key``. ``params`` turns a form into the object the
AWS JSON protocol would have sent for the same call, so that one function
serves an action on both protocols; ``document`` writes an action's answer
(that same object) as the XML document its SDKs parse.

SQS names its lists and maps *flattened*: their members repeat under a
singular name (``AttributeName.1``, ``<QueueUrl>`` … ``<QueueUrl>``). SNS
wraps them: ``Topics.member.1``, ``<Topics><member>…</member></Topics>``,
``<Attributes><entry><key>…</key><value>…</value></entry></Attributes>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from dynamiq.api.aws.errors import AwsError

__all__ = ["SNS", "SQS", "Dialect", "document", "error_document", "params"]


@dataclass(frozen=True)
class Dialect:
    """How one service writes its lists and maps in the query protocol."""

    namespace: str
    flattened: bool
    # Flattened (SQS): a list's or map's JSON name -> the name its members repeat under,
    # and a map's key and value names.
    members: Mapping[str, str]
    maps: Mapping[str, tuple[str, str, str]]


SQS = Dialect(
    namespace="http://queue.amazonaws.com/doc/2012-11-05/",
    flattened=True,
    members={
        "QueueUrls": "QueueUrl",
        "queueUrls": "QueueUrl",
        "Messages": "Message",
        "Failed": "BatchResultErrorEntry",
        "Results": "ListMessageMoveTasksResultEntry",
        "StringListValues": "StringListValue",
        "BinaryListValues": "BinaryListValue",
    },
    maps={
        "Attributes": ("Attribute", "Name", "Value"),
        "MessageAttributes": ("MessageAttribute", "Name", "Value"),
        "MessageSystemAttributes": ("MessageSystemAttribute", "Name", "Value"),
        "Tags": ("Tag", "Key", "Value"),
    },
)
SNS = Dialect(
    namespace="http://sns.amazonaws.com/doc/2010-03-31/",
    flattened=False,
    members={},
    maps={"Attributes": ("entry", "key", "value")},
)

# SQS's flattened request names -> the JSON protocol's member names.
_JSON_NAMES = {
    "Attribute": "Attributes",
    "AttributeName": "AttributeNames",
    "MessageAttribute": "MessageAttributes",
    "MessageSystemAttribute": "MessageSystemAttributes",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "SendMessageBatchRequestEntry": "Entries",
    "DeleteMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
    "Tag": "Tags",
    "TagKey": "TagKeys",
    "StringListValue": "StringListValues",
    "BinaryListValue": "BinaryListValues",
    "AWSAccountId": "AWSAccountIds",
    "ActionName": "Actions",
}
# Flattened SQS maps: their members' key and value names.
_FLAT_MAPS = {
    "Attribute": ("Name", "Value"),
    "MessageAttribute": ("Name", "Value"),
    "MessageSystemAttribute": ("Name", "Value"),
    "Tag": ("Key", "Value"),
}
# Names an action spells its own way in JSON (CreateQueue's tags are lower case).
_ACTION_NAMES = {("CreateQueue", "Tag"): "tags"}
_PROTOCOL_KEYS = frozenset({"Action", "Version"})


def params(dialect: Dialect, form: Iterable[tuple[str, str]], action: str) -> dict[str, Any]:
    """The JSON protocol's parameters for a query form's ``(name, value)`` pairs."""
    tree: dict[str, Any] = {}
    for key, value in form:
        if key in _PROTOCOL_KEYS:
            continue
        *path, last = key.split(".")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise _malformed(key)
        if isinstance(node.get(last), dict):
            raise _malformed(key)
        node[last] = value
    return _struct(tree, action if dialect.flattened else None)


def _malformed(key: str) -> AwsError:
    return AwsError("MalformedQueryString", f"The parameter {key} is given twice over.")


def _struct(tree: Mapping[str, Any], action: str | None) -> dict[str, Any]:
    """``tree`` with the JSON protocol's names: SQS's flattened names are renamed for
    its ``action``; SNS's (``action`` None) are the JSON ones already."""
    return {_json_name(name, action): _value(name, node, action) for name, node in tree.items()}


def _json_name(name: str, action: str | None) -> str:
    if action is None:
        return name
    return _ACTION_NAMES.get((action, name)) or _JSON_NAMES.get(name, name)


def _value(name: str, node: Any, action: str | None) -> Any:
    if not isinstance(node, dict):
        return node
    if set(node) == {"member"}:  # SNS's list
        return [_value("member", item, action) for item in _indexed(node["member"])]
    if set(node) == {"entry"}:  # SNS's map
        return dict(_pair(entry, action) for entry in _indexed(node["entry"]))
    if node and all(k.isdigit() for k in node):  # SQS's flattened list or map
        items = _indexed(node)
        if action is not None and name in _FLAT_MAPS:
            key, value = _FLAT_MAPS[name]
            return {_text(i, key): _value(value, i.get(value), action) for i in _dicts(items)}
        return [_value(name, item, action) for item in items]
    return _struct(node, action)


def _indexed(node: Any) -> list[Any]:
    if not isinstance(node, dict) or not all(k.isdigit() for k in node):
        raise AwsError("MalformedQueryString", "A list's members must be numbered from 1.")
    return [node[k] for k in sorted(node, key=int)]


def _dicts(items: list[Any]) -> list[dict[str, Any]]:
    if not all(isinstance(i, dict) for i in items):
        raise AwsError("MalformedQueryString", "A map's entries need a key and a value.")
    return items


def _pair(entry: Any, action: str | None) -> tuple[str, Any]:
    (item,) = _dicts([entry])
    key_name, value_name = ("key", "value") if "key" in item else ("Name", "Value")
    return _text(item, key_name), _value(value_name, item.get(value_name), action)


def _text(item: Mapping[str, Any], name: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise AwsError("MalformedQueryString", f"A map's entry has no {name}.")
    return value


# -- answers -------------------------------------------------------------------------


def document(dialect: Dialect, action: str, result: Mapping[str, Any], request_id: str) -> bytes:
    """The XML answer to ``action`` whose JSON protocol answer is ``result``."""
    body = "".join(_members(dialect, action, result))
    return (
        f'<?xml version="1.0"?>\n<{action}Response xmlns="{dialect.namespace}">'
        f"<{action}Result>{body}</{action}Result>"
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    ).encode()


def error_document(dialect: Dialect, error: AwsError, request_id: str) -> bytes:
    """The XML error document SDKs read the code and message of."""
    kind = "Sender" if error.sender else "Receiver"
    return (
        f'<?xml version="1.0"?>\n<ErrorResponse xmlns="{dialect.namespace}">'
        f"<Error><Type>{kind}</Type><Code>{_xml(error.query_code)}</Code>"
        f"<Message>{_xml(error.query_message)}</Message><Detail/></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()


def _members(dialect: Dialect, action: str, struct: Mapping[str, Any]) -> Iterable[str]:
    for name, value in struct.items():
        if isinstance(value, list):
            yield from _list(dialect, action, name, value)
        elif isinstance(value, dict) and name in dialect.maps:
            yield from _map(dialect, action, name, value)
        else:
            yield _element(name, _content(dialect, action, value))


def _list(dialect: Dialect, action: str, name: str, items: list[Any]) -> Iterable[str]:
    if dialect.flattened:
        member = f"{action}ResultEntry" if name == "Successful" else dialect.members[name]
        for item in items:
            yield _element(member, _content(dialect, action, item))
    else:
        inner = "".join(_element("member", _content(dialect, action, i)) for i in items)
        yield _element(name, inner)


def _map(dialect: Dialect, action: str, name: str, entries: Mapping[str, Any]) -> Iterable[str]:
    member, key, value = dialect.maps[name]
    pairs = [
        _element(member, _element(key, _xml(k)) + _element(value, _content(dialect, action, v)))
        for k, v in entries.items()
    ]
    if dialect.flattened:
        yield from pairs
    else:
        yield _element(name, "".join(pairs))


def _content(dialect: Dialect, action: str, value: Any) -> str:
    if isinstance(value, dict):
        return "".join(_members(dialect, action, value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return _xml(str(value))


def _element(name: str, content: str) -> str:
    return f"<{name}>{content}</{name}>"


def _xml(text: str) -> str:
    # A carriage return would be read back as a line feed: it is written as a reference.
    return escape(text).replace("\r", "&#xD;")
