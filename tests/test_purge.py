"""purge_memories: scope + filter; force => false only counts."""

from conftest import count_rows

U1, U2 = {"user_id": "u1"}, {"user_id": "u2"}


def test_purge_scope_leaves_other_scopes_intact(bank, conn):
    for i in range(3):
        bank.create_memory(U1, f"u1 fact {i}")
    others = {bank.create_memory(U2, f"u2 fact {i}").name for i in range(2)}
    nested = bank.create_memory({"user_id": "u1", "app": "x"}, "u1 in app x").name
    assert bank.purge_memories(U1) == 3  # force=False only counts
    assert len(bank.list_memories(U1).memories) == 3
    assert bank.purge_memories(U1, force=True) == 3
    assert bank.list_memories(U1).memories == []
    assert {m.name for m in bank.list_memories(U2).memories} == others
    assert [m.name for m in bank.list_memories({"user_id": "u1", "app": "x"}).memories] == [nested]
    memories, revisions = count_rows(conn)
    assert (memories, revisions) == (3, 6 + 3)  # 6 CREATED, 3 DELETED


def test_purge_with_filters(bank):
    a = bank.create_memory(U1, "a", metadata={"source": "chat"}, topics=["USER_PREFERENCES"])
    b = bank.create_memory(U1, "b", metadata={"source": "email"}, topics=["USER_PERSONAL_INFO"])
    assert bank.purge_memories(U1, metadata_filter={"source": "chat"}, force=True) == 1
    assert [m.name for m in bank.list_memories(U1).memories] == [b.name]
    assert bank.purge_memories(U1, topics=["USER_PERSONAL_INFO"], force=True) == 1
    assert bank.list_revisions(a.name)[-1].labels == {"reason": "purge"}
