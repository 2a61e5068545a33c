-- Scoped views for plain-SQL readers, and scope bindings of database roles.
--
-- A reader that speaks only SQL (a BI tool, an ORM, another language) sets
-- the scope once, membank.set_scope('{"user_id":"u1"}'), and reads the views
-- membank.scoped_memories, scoped_profiles and scoped_revisions, which show
-- exactly that scope, and nothing at all while no scope is set: never
-- everything. The scope lives in the setting membank.scope (session-local,
-- or transaction-local with is_local => true).
--
-- Tenant roles: membank.bind_role_to_scope(role, scope) restricts a
-- database role (and every login that is a member of it) to its bound
-- scopes. The binding is consulted in the one place every API function
-- resolves a scope argument (membank_private.validate_scope), in the
-- functions that take a memory or operation name without a scope (a memory
-- of another scope is reported as not found), and in the views' filter
-- (membank_private.active_scope), so a bound role that sets another scope,
-- or writes the setting directly, sees nothing of it. This is row-level
-- security by view predicate: the views are security_barrier views owned
-- by the schema owner, so no function the caller adds to a query runs on a
-- row before the scope filter has passed it. The caller is the session's
-- login role (session_user) and, after SET ROLE, that role too.

-- name: bound_scopes: the scopes the calling roles are bound to; null when no binding restricts them.
create or replace function membank_private.bound_scopes()
returns jsonb[]
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _result jsonb [];
begin
    if not exists (select from membank_private.scope_bindings) then
        return null;  -- the common case: no tenant roles at all
    end if;
    with recursive caller (oid) as (
        select r.oid from pg_catalog.pg_roles as r
        where r.rolname in (session_user, nullif(current_setting('role', true), 'none'))
        union
        select m.roleid from pg_catalog.pg_auth_members as m inner join caller as c on m.member = c.oid
    )
    select array_agg(b.scope order by b.scope_id) into _result
    from membank_private.scope_bindings as b
    inner join pg_catalog.pg_roles as r on r.rolname = b.role_name
    where r.oid in (select c.oid from caller as c);
    return _result;
end
$$;

-- name: scope_allowed: true when the calling roles may read and write scope (no binding, or bound to it).
-- Security invoker, like bound_scopes: it runs inside the API's definer
-- functions and active_scope(), which may read scope_bindings; the fast path
-- (no binding at all) costs one probe of an empty table.
create or replace function membank_private.scope_allowed(scope jsonb)
returns boolean
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _bound jsonb [];
begin
    if not exists (select from membank_private.scope_bindings) then
        return true;
    end if;
    _bound := membank_private.bound_scopes();
    return _bound is null or scope = any(_bound);
end
$$;

-- name: check_scope_allowed: raise 42501 unless the calling roles may use scope.
create or replace function membank_private.check_scope_allowed(scope jsonb, argument text default 'scope')
returns void
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if not membank_private.scope_allowed(scope) then
        raise exception '%: your role is bound to other scopes', argument
            using errcode = 'insufficient_privilege', detail = format('argument: %s', argument),
                  hint = 'a role bound with bind_role_to_scope reads and writes only its bound scopes';
    end if;
end
$$;

-- name: refuse_bound_role: raise 42501 when a role bound to scopes calls a function that carries every scope's text.
create or replace function membank_private.refuse_bound_role(function_name text)
returns void
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if membank_private.bound_scopes() is not null then
        raise exception '%: a role bound to scopes may not carry the jobs of every scope', function_name
            using errcode = 'insufficient_privilege',
                  hint = 'run workers under a role without scope bindings';
    end if;
end
$$;

-- name: active_scope: the scope set by set_scope, if the calling roles may read it; else null.
create or replace function membank_private.active_scope()
returns jsonb
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb;
begin
    begin
        _scope := nullif(current_setting('membank.scope', true), '')::jsonb;
    exception
        when others then
            return null;  -- the setting was written directly with something that is not JSON
    end;
    if _scope is null or jsonb_typeof(_scope) <> 'object' or not membank_private.scope_allowed(_scope) then
        return null;
    end if;
    return _scope;
end
$$;

-- name: set_scope: set the scope the scoped views show (session-local, or transaction-local).
create or replace function membank.set_scope(scope jsonb, is_local boolean default false)
returns jsonb
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
begin
    if is_local is null then
        perform membank_private._raise_invalid('is_local', 'must be true or false',
            'false (default): for the session; true: until the transaction ends');
    end if;
    perform set_config('membank.scope',
                       case when scope is null then '' else membank_private.validate_scope(scope)::text end, is_local);
    return scope;
end
$$;

comment on function membank.set_scope(jsonb, boolean) is
$$Set the exact scope (a scope object, as for every API function) that the views membank.scoped_memories,
scoped_profiles and scoped_revisions show, for the session (is_local => false, the default) or until the transaction
ends (is_local => true). Returns the scope. The views show nothing while no scope is set, and nothing for a scope the
caller's role is not bound to. scope => null clears it. Raises 22023 naming the argument, 42501 (a role
bound with bind_role_to_scope, setting another scope).$$;

-- name: current_scope: the scope the scoped views show now (null when none, or not allowed).
create or replace function membank.current_scope()
returns jsonb
language sql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
    select membank_private.active_scope();
$$;

comment on function membank.current_scope() is
$$The exact scope the scoped views show now: the one set_scope set, or null when none is set or the caller's role is
bound to other scopes. Raises nothing.$$;

-- name: bind_role_to_scope: restrict a database role (and its members) to a scope; bindings add up.
create or replace function membank.bind_role_to_scope(role name, scope jsonb)
returns boolean
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
begin
    if role is null or not exists (select from pg_catalog.pg_roles as r where r.rolname = bind_role_to_scope.role) then
        raise exception 'role: no database role %', coalesce(to_jsonb(role::text)::text, 'null')
            using errcode = 'undefined_object', detail = 'argument: role',
                  hint = 'create the role first (create role tenant_u1 login), then bind it';
    end if;
    if role in ('membank_reader', 'membank_writer', 'membank_admin')
       or exists (select from pg_catalog.pg_roles as r where r.rolname = bind_role_to_scope.role and r.rolsuper) then
        perform membank_private._raise_invalid('role', format('%s cannot be bound', role),
            'bind a tenant role of its own, and grant membank_reader (or membank_writer) to it');
    end if;
    insert into membank_private.scope_bindings as b (role_name, scope)
    values (role, _scope)
    on conflict do nothing;
    return found;
end
$$;

comment on function membank.bind_role_to_scope(name, jsonb) is
$$Bind database role role to an exact scope: from then on the role, and every role that is a member of it, reads and
writes only its bound scopes (bindings add up) through every API function (another scope raises 42501; a memory or
operation of another scope is not found) and through the scoped views (which show nothing for another scope, even
when set_scope or the membank.scope setting names one). Returns true when the binding is new. Raises 42704 (no such
role), 22023 naming the argument (a bad scope; membank's own roles or a superuser cannot be bound).$$;

-- name: unbind_role_from_scope: remove one binding of a role; a role without bindings is unrestricted again.
create or replace function membank.unbind_role_from_scope(role name, scope jsonb)
returns boolean
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
begin
    delete from membank_private.scope_bindings as b
    where b.role_name = unbind_role_from_scope.role
      and b.scope_id = md5(membank_private.validate_scope(unbind_role_from_scope.scope)::text)::uuid;
    return found;
end
$$;

comment on function membank.unbind_role_from_scope(name, jsonb) is
$$Remove the binding of role to scope; returns true when there was one. A role left with no binding (and not a member
of a bound role) is no longer restricted: revoke its membank role first if it should read nothing. Raises 22023
naming the argument.$$;

-- name: list_scope_bindings: the scope bindings, of one role or of all.
create or replace function membank.list_scope_bindings(role name default null)
returns table (role_name name, scope jsonb, create_time timestamptz)
language sql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
    select b.role_name, b.scope, b.create_time
    from membank_private.scope_bindings as b
    where list_scope_bindings.role is null or b.role_name = list_scope_bindings.role
    order by b.role_name, b.create_time;
$$;

comment on function membank.list_scope_bindings(name) is
$$The scope bindings made with bind_role_to_scope (role_name, scope, create_time), of role when given. Raises
nothing.$$;

create or replace view membank.scoped_memories with (security_barrier) as
select
    m.name,
    m.scope,
    m.memory_type,
    m.fact,
    m.structured_content,
    m.topics,
    m.metadata,
    m.revision,
    m.create_time,
    m.update_time,
    m.expire_time
from membank_private.memories as m
where
    m.scope_id = md5(membank_private.active_scope()::text)::uuid
    and m.scope = membank_private.active_scope()
    and (m.expire_time is null or m.expire_time > statement_timestamp());

comment on view membank.scoped_memories is
'The live memories (both types) of the scope set with membank.set_scope; empty while none is set.';

create or replace view membank.scoped_profiles with (security_barrier) as
select
    m.structured_content ->> 'schema_id' as schema_id,
    m.structured_content ->> 'field' as field,
    m.structured_content -> 'value' as value,
    m.name as memory_name,
    m.revision,
    m.update_time,
    m.expire_time
from membank_private.memories as m
where
    m.scope_id = md5(membank_private.active_scope()::text)::uuid
    and m.memory_type = 'STRUCTURED_PROFILE'
    and m.scope = membank_private.active_scope()
    and m.structured_content ? 'schema_id'
    and (m.expire_time is null or m.expire_time > statement_timestamp());

comment on view membank.scoped_profiles is
'One row per live profile field (schema_id, field, value) of the scope set with membank.set_scope; empty while none.';

create or replace view membank.scoped_revisions with (security_barrier) as
select
    r.memory_name,
    r.revision,
    r.scope,
    r.action,
    r.memory_type,
    r.fact,
    r.previous_fact,
    r.structured_content,
    r.previous_structured_content,
    r.topics,
    r.metadata,
    r.expire_time,
    r.labels,
    r.source_event_ids,
    r.extracted_memories,
    r.create_time
from membank_private.memory_revisions as r
where
    r.scope_id = md5(membank_private.active_scope()::text)::uuid
    and r.scope = membank_private.active_scope();

comment on view membank.scoped_revisions is
'Every revision of every memory of the scope set with membank.set_scope (deleted ones too); empty while none is set.';
