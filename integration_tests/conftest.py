"""Fixtures of the integration tests.

``fake_grid`` is an in-process stand-in for Flower's ``Grid`` (no Ray): it runs a ``ServerApp``
against ``ClientApp``s in this process, the way the simulation engine delivers messages;
``task_identity`` fakes the task identity Flower builds instruction messages from.
"""

from __future__ import annotations

import pytest


def _grid_class():
    from flwr.app import Context, Error, Message, RecordDict

    class FakeGrid:
        """Enough of ``flwr.serverapp.Grid`` for ``Strategy.start``: delivers messages in-process."""

        def __init__(self, client_app, num_nodes: int) -> None:
            self.client_app = client_app
            self.nodes = {100 + c: c for c in range(num_nodes)}  # node id -> partition id
            self.contexts = {
                node: Context(
                    run_id=1,
                    node_id=node,
                    node_config={"partition-id": c, "num-partitions": num_nodes},
                    state=RecordDict(),
                    run_config={},
                )
                for node, c in self.nodes.items()
            }

        def get_node_ids(self):
            return list(self.nodes)

        def send_and_receive(self, messages, *, timeout=None):
            replies = []
            for msg in messages:
                node = msg.metadata.dst_node_id
                try:
                    replies.append(self.client_app(msg, self.contexts[node]))
                except Exception as exc:  # what a SuperNode does with a raising ClientApp
                    replies.append(Message(Error(code=0, reason=repr(exc)), reply_to=msg))
            return replies[::-1]  # arrival order is not partition order

    return FakeGrid


@pytest.fixture
def fake_grid():
    """The ``FakeGrid`` class (needs the ``flower`` extra)."""
    pytest.importorskip("flwr")
    return _grid_class()


@pytest.fixture
def task_identity(monkeypatch):
    """Flower builds instruction messages from the process's task identity; fake one."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)
