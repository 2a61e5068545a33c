-- Listing the exact scopes a caller may reach that contain a pattern.
--
-- Scopes match exactly everywhere in membank: no function reads "every
-- scope under {"app_name": "shop"}". A store that names its scopes by a
-- path (LangGraph's namespaces: ("users", "alice") becomes the scope
-- {"store": "langgraph", "ns.0": "users", "ns.1": "alice"}) still has to
-- answer "which namespaces start with ("users",)?". This function answers
-- that and nothing more: it names scopes, and every read of a scope's
-- memories still goes through the exact-scope API functions. It never
-- widens what a role reaches: a role bound with bind_role_to_scope is
-- answered from its own bindings alone (the scopes it could name anyway),
-- and an unrestricted role learns only scope names it could already read
-- with list_memories. Containment (@>) of a pattern whose values are strings
-- is exactly "these keys have these values", so a pattern is a prefix of a
-- path only when the path's positions are keys ("ns.0", "ns.1", ...).

-- name: list_scopes: the scopes holding live memories that contain scope_pattern, of those the caller may reach.
create or replace function membank.list_scopes(
    scope_pattern jsonb default '{}', max_scopes integer default 1000, after_scope jsonb default null
) returns table (scope jsonb, memories bigint)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _bound jsonb [];
begin
    if jsonb_typeof(scope_pattern) is distinct from 'object' then
        perform membank_private._raise_invalid('scope_pattern', format('must be a JSON object, got %s',
            coalesce(jsonb_typeof(scope_pattern), 'null')),
            'every scope that contains it is listed, e.g. {"store": "langgraph", "ns.0": "users"}; {} lists all');
    end if;
    if exists (select from jsonb_each(scope_pattern) as e where jsonb_typeof(e.value) <> 'string') then
        perform membank_private._raise_invalid('scope_pattern', 'values must be strings',
            'a scope maps string keys to string values; a pattern names some of them, e.g. {"ns.0": "users"}');
    end if;
    if max_scopes is null or max_scopes not between 1 and 10000 then
        perform membank_private._raise_invalid('max_scopes', 'must be between 1 and 10000', 'the default is 1000');
    end if;
    if after_scope is not null and jsonb_typeof(after_scope) is distinct from 'object' then
        perform membank_private._raise_invalid('after_scope', 'must be a JSON object or null',
            'pass the scope of the last row of the previous page');
    end if;
    _bound := membank_private.bound_scopes();
    if _bound is not null then
        -- A restricted role: only its own bindings can be listed ({} when none is left: nothing).
        return query
        select b.scope, count(m.name)
        from unnest(_bound) as b (scope)
        join membank_private.memories as m
            on m.scope_id = md5(b.scope::text)::uuid and m.scope = b.scope
        where b.scope @> scope_pattern and membank_private.is_live(m.expire_time)
          and (after_scope is null or b.scope::text collate "C" > after_scope::text collate "C")
        group by b.scope
        order by b.scope::text collate "C"
        limit max_scopes;
        return;
    end if;
    return query
    select m.scope, count(*)
    from membank_private.memories as m
    where m.scope @> scope_pattern and membank_private.is_live(m.expire_time)
      and (after_scope is null or m.scope::text collate "C" > after_scope::text collate "C")
    group by m.scope
    order by m.scope::text collate "C"
    limit max_scopes;
end
$$;

comment on function membank.list_scopes(jsonb, integer, jsonb) is
$$The exact scopes that hold live memories and contain scope_pattern (a JSON object of string values, containment
@>: each key of the pattern has that value; {} is every scope), with how many live memories each holds, ordered by
the scope's jsonb text (C collation), at most max_scopes (1..10000, default 1000) rows; after_scope (the scope of the
last row of the previous page) continues after it. Only scopes the caller may reach are listed: a role bound with
bind_role_to_scope gets only its bound scopes (none when its bindings are gone), never another's. It names scopes
and reads nothing else: the memories are read with the exact-scope functions. For path-shaped scopes, such as
LangGraph namespaces stored as {"ns.0": "users", "ns.1": "alice"}, a pattern of the first positions is a prefix
search (membank.langgraph.MembankStore). Scans the memories of the matching scopes (every memory for an unrestricted
role). Raises 22023 naming the argument (scope_pattern, max_scopes, after_scope).
Columns:
- scope: the exact scope (a JSON object), as create_memory stored it; pass it to the exact-scope functions.
- memories: how many live (not deleted, not expired) memories the scope holds.$$;
