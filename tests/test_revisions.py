"""Revisions: immutable history written on every create, update and delete."""

import psycopg
import pytest

from membank import InvalidArgumentError, NotFoundError

U1 = {"user_id": "u1"}


def test_update_keeps_one_memory_and_both_revisions(bank):
    m = bank.create_memory(U1, "name is Coco")
    updated = bank.update_memory(m.name, fact="name is Joy")
    assert updated.name == m.name and updated.revision == 2
    assert [x.fact for x in bank.list_memories(U1).memories] == ["name is Joy"]
    revisions = bank.list_revisions(m.name)
    assert [(r.revision, r.action, r.fact, r.previous_fact) for r in revisions] == [
        (1, "CREATED", "name is Coco", None),
        (2, "UPDATED", "name is Joy", "name is Coco"),
    ]


def test_update_changes_only_what_is_given(bank):
    m = bank.create_memory(U1, "likes tea", topics=["USER_PREFERENCES"], metadata={"src": "chat"})
    updated = bank.update_memory(m.name, metadata={"src": "email"})
    assert (updated.fact, updated.topics, updated.metadata) == ("likes tea", ["USER_PREFERENCES"], {"src": "email"})
    assert updated.expire_time is None


def test_update_without_change_writes_no_revision(bank):
    m = bank.create_memory(U1, "likes tea")
    again = bank.update_memory(m.name, fact="likes tea")
    assert again.revision == 1
    assert len(bank.list_revisions(m.name)) == 1


def test_update_with_nothing_given_is_an_error(bank):
    m = bank.create_memory(U1, "likes tea")
    with pytest.raises(InvalidArgumentError, match="nothing to update"):
        bank.update_memory(m.name)


def test_delete_hides_memory_but_keeps_revisions(bank):
    m = bank.create_memory(U1, "lives in Lisbon")
    keep = bank.create_memory(U1, "works as a nurse")
    deleted = bank.delete_memory(m.name)
    assert deleted.fact == "lives in Lisbon"
    with pytest.raises(NotFoundError, match="not found"):
        bank.get_memory(m.name)
    assert [x.name for x in bank.list_memories(U1).memories] == [keep.name]
    revisions = bank.list_revisions(m.name)
    assert [(r.revision, r.action, r.fact) for r in revisions] == [
        (1, "CREATED", "lives in Lisbon"), (2, "DELETED", "lives in Lisbon")]
    assert bank.get_revision(m.name, 1).fact == "lives in Lisbon"
    with pytest.raises(NotFoundError):
        bank.delete_memory(m.name)


def test_revisions_respect_scope(bank):
    m = bank.create_memory(U1, "secret")
    with pytest.raises(NotFoundError):
        bank.list_revisions(m.name, scope={"user_id": "u2"})
    with pytest.raises(NotFoundError):
        bank.get_revision(m.name, 1, scope={"user_id": "u2"})
    assert len(bank.list_revisions(m.name, scope=U1)) == 1
    with pytest.raises(NotFoundError, match="no revision 7"):
        bank.get_revision(m.name, 7)


def test_rollback_is_a_new_revision(bank):
    m = bank.create_memory(U1, "name is Coco")
    bank.update_memory(m.name, fact="name is Joy")
    back = bank.rollback_memory(m.name, 1)
    assert (back.fact, back.revision) == ("name is Coco", 3)
    last = bank.get_revision(m.name, 3)
    assert (last.action, last.previous_fact, last.labels) == ("UPDATED", "name is Joy", {"rollback_to": 1})


def test_rollback_revives_a_deleted_memory(bank):
    m = bank.create_memory(U1, "name is Coco")
    bank.delete_memory(m.name)
    with pytest.raises(InvalidArgumentError, match="records a deletion"):
        bank.rollback_memory(m.name, 2)
    back = bank.rollback_memory(m.name, 1)
    assert (back.name, back.fact, back.revision) == (m.name, "name is Coco", 3)
    assert back.create_time == m.create_time
    assert bank.get_memory(m.name).fact == "name is Coco"
    assert [r.action for r in bank.list_revisions(m.name)] == ["CREATED", "DELETED", "CREATED"]


def test_revisions_are_immutable(bank, conn):
    m = bank.create_memory(U1, "fact")
    with pytest.raises(psycopg.Error) as err:
        conn.execute("update membank_private.memory_revisions set fact = 'forged'")
    assert err.value.sqlstate == "MB002"
    assert bank.get_revision(m.name, 1).fact == "fact"


def test_scope_of_a_memory_never_changes(bank, conn):
    m = bank.create_memory(U1, "fact")
    with pytest.raises(psycopg.Error) as err:
        conn.execute("""update membank_private.memories set scope = '{"user_id":"u2"}'""")
    assert err.value.sqlstate == "MB001"
    assert bank.get_memory(m.name).scope == U1


def test_revision_keeps_labels_and_source_event_ids(bank):
    m = bank.create_memory(U1, "fact", labels={"by": "test"}, source_event_ids=["e1", "e2"])
    r = bank.get_revision(m.name, 1)
    assert (r.labels, r.source_event_ids) == ({"by": "test"}, ["e1", "e2"])
    bank.update_memory(m.name, fact="fact 2", source_event_ids=["e3"])
    assert bank.get_revision(m.name, 2).source_event_ids == ["e3"]
