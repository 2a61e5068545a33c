"""list_memories: keyset paging with page tokens and filters."""

import pytest

from membank import InvalidArgumentError

U1 = {"user_id": "u1"}


def test_pages_cover_every_memory_once_in_order(bank):
    created = [bank.create_memory(U1, f"fact {i}").name for i in range(7)]
    first = bank.list_memories(U1, page_size=3)
    assert [m.name for m in first.memories] == created[:3] and first.next_page_token
    second = bank.list_memories(U1, page_size=3, page_token=first.next_page_token)
    third = bank.list_memories(U1, page_size=3, page_token=second.next_page_token)
    assert [m.name for m in second.memories] == created[3:6]
    assert [m.name for m in third.memories] == created[6:] and third.next_page_token is None
    assert [m.name for m in bank.iter_memories(U1, page_size=2)] == created


def test_exactly_full_last_page_has_no_token(bank):
    for i in range(4):
        bank.create_memory(U1, f"fact {i}")
    page = bank.list_memories(U1, page_size=2)
    assert page.next_page_token
    assert bank.list_memories(U1, page_size=2, page_token=page.next_page_token).next_page_token is None


def test_filters(bank):
    a = bank.create_memory(U1, "a", metadata={"source": "chat", "n": 1}, topics=["USER_PREFERENCES"])
    b = bank.create_memory(U1, "b", metadata={"source": "email"}, topics=["USER_PERSONAL_INFO", "X"])
    profile = bank.create_memory(U1, memory_type="STRUCTURED_PROFILE", structured_content={"city": "Lisbon"})
    assert [m.name for m in bank.list_memories(U1, metadata_filter={"source": "chat"}).memories] == [a.name]
    assert [m.name for m in bank.list_memories(U1, topics=["X"]).memories] == [b.name]
    assert [m.name for m in bank.list_memories(U1, memory_type="STRUCTURED_PROFILE").memories] == [profile.name]
    # Profile fields are listed only when asked for (memory_type), as Memory Bank does.
    assert [m.name for m in bank.list_memories(U1, created_after=a.create_time).memories] == [b.name]
    assert [m.name for m in bank.list_memories(U1, created_after=a.create_time,
                                               memory_type="STRUCTURED_PROFILE").memories] == [profile.name]
    assert [m.name for m in bank.list_memories(U1, created_before=b.create_time).memories] == [a.name]
    updated = bank.update_memory(a.name, fact="a2")
    assert [m.name for m in bank.list_memories(U1, updated_after=profile.update_time).memories] == [updated.name]
    assert [m.name for m in bank.list_memories(U1, updated_before=b.update_time).memories] == []


def test_filter_keys_with_sql_metacharacters_match_nothing(bank):
    bank.create_memory(U1, "a", metadata={"source": "chat"})
    for evil in ({"source' OR 1=1 --": "x"}, {"source": "chat' OR '1'='1"}, {"a\"b": "--"}):
        assert bank.list_memories(U1, metadata_filter=evil).memories == []


def test_garbage_page_token(bank):
    with pytest.raises(InvalidArgumentError, match="page_token: is not a token returned by list_memories"):
        bank.list_memories(U1, page_token="not-a-token")
