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
--
-- Fail closed: a role is restricted while it has a row in bound_roles
-- (keyed by its OID), whatever number of bindings it has left, so a
-- restricted role whose every scope was erased or unbound reaches nothing;
-- only membank.unrestrict_role lifts a restriction.
--
-- On Citus every node gives a role its own OID, and an application login
-- may connect to a worker as well as to the coordinator. bound_roles and
-- scope_bindings are reference tables (the same rows on every node), keyed
-- by the coordinator's OID; each row also records the role's name and each
-- worker's OID of it (worker_oids, by Citus group id), read from the workers
-- when the role is bound (or by refresh_role_bindings). A node matches a
-- caller by its own OID of the role: the coordinator (group 0) and one
-- server by role_oid, a worker by its entry in worker_oids, and a worker
-- that has no entry (added after the binding) by the recorded name. So a
-- bound login is bound on every node it can reach, a renamed role stays
-- bound wherever its OID was recorded, and nothing a worker cannot resolve
-- widens anyone.

-- name: local_role_oid: this node's OID of a bound role (its bound_roles row's role_oid, role_name, worker_oids).
-- One server and the Citus coordinator (group 0): role_oid. A Citus worker:
-- the OID recorded for its group when the role was bound; a worker with no
-- entry (added later): the OID its own catalog gives the recorded name, so
-- a worker that was never told of a binding still restricts the role.
create or replace function membank_private.local_role_oid(role_oid oid, role_name name, worker_oids jsonb)
returns oid
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case
        when membank_private.node_group() = 0 then local_role_oid.role_oid
        else coalesce((local_role_oid.worker_oids ->> membank_private.node_group()::text)::oid,
                      (select r.oid from pg_catalog.pg_roles as r where r.rolname = local_role_oid.role_name))
    end;
$$;

-- name: bound_role_oids: the restricted roles among the calling roles (login, SET ROLE's role, their groups).
-- A role is restricted while it has a row in bound_roles, whatever number of
-- scope bindings it has left: restriction is a property of the role (its
-- OID), so erasing, purging or unbinding its last scope never widens it.
-- Returns the rows' keys (role_oid, the coordinator's OID on Citus); each row
-- is matched by this node's OID of its role (local_role_oid).
create or replace function membank_private.bound_role_oids()
returns oid[]
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    with recursive caller (oid) as (
        select r.oid from pg_catalog.pg_roles as r
        where r.rolname in (session_user, nullif(current_setting('role', true), 'none'))
        union
        select m.roleid from pg_catalog.pg_auth_members as m inner join caller as c on m.member = c.oid
    )
    select coalesce(array_agg(b.role_oid order by b.role_oid), '{}')
    from membank_private.bound_roles as b
    where membank_private.local_role_oid(b.role_oid, b.role_name, b.worker_oids) in (select c.oid from caller as c);
$$;

-- name: bound_scopes: the calling roles' bound scopes ({} for a restricted role with none); null: unrestricted.
create or replace function membank_private.bound_scopes()
returns jsonb[]
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _roles oid [];
begin
    perform membank_private.check_node_privileges();
    if not exists (select from membank_private.bound_roles) then
        return null;  -- the common case: no tenant roles at all
    end if;
    _roles := membank_private.bound_role_oids();
    if cardinality(_roles) = 0 then
        return null;
    end if;
    -- Fail closed: a restricted role with no binding left reaches no scope ({}), never every scope (null).
    return coalesce((select array_agg(b.scope order by b.scope_id) from membank_private.scope_bindings as b
                     where b.role_oid = any(_roles)), '{}');
end
$$;

-- name: scope_allowed: true when the calling roles may read and write scope (unrestricted, or bound to it).
-- Security invoker, like bound_scopes: it runs inside the API's definer
-- functions and active_scope(), which may read scope_bindings; the fast path
-- (no restricted role at all) costs one probe of an empty table.
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
    perform membank_private.check_node_privileges();
    if not exists (select from membank_private.bound_roles) then
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

-- name: refuse_bound_caller: raise 42501 when a role bound to scopes calls a bank-wide function.
create or replace function membank_private.refuse_bound_caller(function_name text)
returns void
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if membank_private.bound_scopes() is not null then
        raise exception '%: a role bound to scopes may not call a bank-wide function (settings, bindings, every scope''s maintenance)',
            function_name
            using errcode = 'insufficient_privilege',
                  hint = 'an admin role without scope bindings manages bindings and the bank''s settings';
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

-- Binding management is the unrestricted admin's: a bound role (even one
-- holding membank_admin) changes no binding, its own included, and lists
-- only its own. Bindings and restrictions are keyed by the role's OID, read
-- from pg_roles when the call is made: a renamed role keeps its restriction,
-- a dropped role's rows restrict nobody (and are pruned on the next bind),
-- and a new role of the same name starts unrestricted, like any new role.
-- A wait on another admin's open binding change is bounded (MB040).

-- name: refuse_off_coordinator: raise 0A000 when a binding change is made on a Citus worker.
-- The binding's key is the coordinator's OID of the role, and only the
-- coordinator reaches every worker to record theirs.
create or replace function membank_private.refuse_off_coordinator(function_name text)
returns void
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if membank_private.node_group() <> 0 then
        raise exception '%: scope bindings are changed on the Citus coordinator, not on a worker', function_name
            using errcode = 'feature_not_supported',
                  hint = 'connect to the coordinator; it records every node''s OID of the role';
    end if;
end
$$;

-- name: worker_role_oids: each Citus worker's OID of database role role, {"<group id>": oid}; {} on one server.
-- A worker where the role does not exist (yet) has no entry: it matches the
-- role by its recorded name (local_role_oid).
create or replace function membank_private.worker_role_oids(role name)
returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _oids jsonb;
begin
    if not membank_private.distributed() then
        return '{}';
    end if;
    -- run_command_on_workers and pg_dist_node exist only with Citus: dynamic SQL.
    execute $sql$
        select coalesce(jsonb_object_agg(n.groupid::text, w.result::bigint), '{}')
        from pg_catalog.run_command_on_workers(
            pg_catalog.format('select r.oid from pg_catalog.pg_roles as r where r.rolname = %L', $1)
        ) as w
        inner join pg_catalog.pg_dist_node as n on n.nodename = w.nodename and n.nodeport = w.nodeport
        where w.success and w.result <> '' and n.groupid <> 0
    $sql$ into _oids using role;
    return _oids;
end
$$;

-- name: prune_dropped_roles: delete the bound_roles rows (and their bindings) of roles that no longer exist.
-- Rows of dropped roles restrict nobody; pruned so that a later role given
-- the same OID starts clean. The OIDs are gathered first, so the DELETE on
-- the reference table (every node's copy) names constants only.
create or replace function membank_private.prune_dropped_roles()
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _keys oid [];
begin
    _keys := array(select b.role_oid from membank_private.bound_roles as b);
    _keys := array(select k from unnest(_keys) as k
                   where not exists (select from pg_catalog.pg_roles as r where r.oid = k));
    if cardinality(_keys) > 0 then
        delete from membank_private.bound_roles as b where b.role_oid = any(_keys);
    end if;
end
$$;

-- name: resolve_role: the OID of database role role, or 42704 naming the argument.
create or replace function membank_private.resolve_role(role name)
returns oid
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _oid oid;
begin
    select r.oid into _oid from pg_catalog.pg_roles as r where r.rolname = resolve_role.role;
    if _oid is null then
        raise exception 'role: no database role %', coalesce(to_jsonb(role::text)::text, 'null')
            using errcode = 'undefined_object', detail = 'argument: role',
                  hint = 'create the role first (create role tenant_u1 login), then bind it';
    end if;
    return _oid;
end
$$;

-- name: bind_role_to_scope: restrict a database role (and its members) to a scope; bindings add up.
create or replace function membank.bind_role_to_scope(role name, scope jsonb)
returns boolean
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb;
    _oid oid;
    _workers jsonb;
begin
    perform membank_private.refuse_bound_caller('bind_role_to_scope');
    perform membank_private.refuse_off_coordinator('bind_role_to_scope');
    _scope := membank_private.validate_scope(scope);
    _oid := membank_private.resolve_role(role);
    if role in ('membank_reader', 'membank_writer', 'membank_worker', 'membank_admin')
       or exists (select from pg_catalog.pg_roles as r where r.oid = _oid and r.rolsuper) then
        perform membank_private._raise_invalid('role', format('%s cannot be bound', role),
            'bind a tenant role of its own, and grant membank_reader (or membank_writer) to it');
    end if;
    _workers := membank_private.worker_role_oids(role);
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    perform membank_private.prune_dropped_roles();
    insert into membank_private.bound_roles as b (role_oid, role_name, worker_oids) values (_oid, role, _workers)
    on conflict (role_oid) do update set role_name = excluded.role_name, worker_oids = excluded.worker_oids;
    insert into membank_private.scope_bindings as b (role_oid, scope_id, scope)
    values (_oid, md5(_scope::text)::uuid, _scope) on conflict do nothing;
    return found;
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('role', 'the scope bindings');
end
$$;

comment on function membank.bind_role_to_scope(name, jsonb) is
$$Bind database role role to an exact scope: from then on the role, and every role that is a member of it, is
restricted: it reads and writes only its bound scopes (bindings add up) through every API function (another scope
raises 42501; a memory or operation of another scope is not found) and through the scoped views (which show nothing
for another scope, even when set_scope or the membank.scope setting names one). The restriction belongs to the role
(its OID) and outlives its last binding: a restricted role whose bindings were all removed (unbind_role_from_scope,
erase_scope) reaches no scope; only unrestrict_role lifts it. On Citus the binding holds on every node a login can
connect to: it records each worker's OID of the role (see refresh_role_bindings). Returns true when the binding is
new. Only a role without bindings may call it. Raises 42501 (the caller is bound to scopes), 42704 (no such role),
22023 naming the argument (a bad scope; membank's own roles or a superuser cannot be bound), 0A000 (called on a Citus
worker), MB040 after waiting membank.lock_timeout for another binding change (retryable).$$;

-- name: unbind_role_from_scope: remove one binding of a role; it stays restricted (with no scope left: to nothing).
create or replace function membank.unbind_role_from_scope(role name, scope jsonb)
returns boolean
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb;
    _oid oid;
begin
    perform membank_private.refuse_bound_caller('unbind_role_from_scope');
    perform membank_private.refuse_off_coordinator('unbind_role_from_scope');
    _scope := membank_private.validate_scope(scope);
    -- Resolved first: the DELETE on the reference table then names a constant (Citus cannot join pg_authid).
    _oid := (select r.oid from pg_catalog.pg_roles as r where r.rolname = unbind_role_from_scope.role);
    if _oid is null then
        return false;
    end if;
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    delete from membank_private.scope_bindings as b
    where b.role_oid = _oid and b.scope_id = md5(_scope::text)::uuid and b.scope = _scope;
    return found;
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('role', 'the scope bindings');
end
$$;

comment on function membank.unbind_role_from_scope(name, jsonb) is
$$Remove the binding of role to scope; returns true when there was one (false for no such binding or role). The
role stays restricted: with no binding left it reaches no scope at all (unrestrict_role lifts the restriction).
Only a role without bindings may call it. Raises 42501 (the caller is bound to scopes), 22023 naming the argument,
0A000 (called on a Citus worker), MB040 after waiting membank.lock_timeout for another binding change
(retryable).$$;

-- name: unrestrict_role: lift a role's restriction and drop all its bindings; it then reaches what its grants allow.
create or replace function membank.unrestrict_role(role name)
returns boolean
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _oid oid;
begin
    perform membank_private.refuse_bound_caller('unrestrict_role');
    perform membank_private.refuse_off_coordinator('unrestrict_role');
    _oid := membank_private.resolve_role(role);
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    delete from membank_private.bound_roles as b where b.role_oid = _oid;  -- its bindings cascade
    return found;
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('role', 'the scope bindings');
end
$$;

comment on function membank.unrestrict_role(name) is
$$Lift the restriction of role (bind_role_to_scope) and remove all of its scope bindings: the role, and its members
that no other restricted role holds, then reach every scope their membank grants allow. The only call that widens a
role; removing its last binding does not. Returns true when the role was restricted. Only a role without bindings
may call it. Raises 42501 (the caller is bound to scopes), 42704 (no such role), 0A000 (called on a Citus worker),
MB040 after waiting membank.lock_timeout for another binding change (retryable).$$;

-- name: refresh_role_bindings: record every node's OID of each restricted role again (after a node is added).
create or replace function membank.refresh_role_bindings()
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _key oid;
    _name name;
    _workers jsonb;
    _count integer := 0;
begin
    perform membank_private.refuse_bound_caller('refresh_role_bindings');
    perform membank_private.refuse_off_coordinator('refresh_role_bindings');
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    perform membank_private.prune_dropped_roles();
    for _key in select b.role_oid from membank_private.bound_roles as b order by b.role_oid loop
        _name := (select r.rolname from pg_catalog.pg_roles as r where r.oid = _key);  -- its name now
        _workers := membank_private.worker_role_oids(_name);
        update membank_private.bound_roles as b set role_name = _name, worker_oids = _workers
        where b.role_oid = _key;
        _count := _count + 1;
    end loop;
    return _count;
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('role', 'the scope bindings');
end
$$;

comment on function membank.refresh_role_bindings() is
$$Record again, for every restricted role (bind_role_to_scope), its current name and each Citus worker's OID of it;
rows of dropped roles are removed. Run it on the coordinator after citus_add_node (and after renaming a restricted
role): until then a new worker matches a restricted role by the name recorded at binding time, so a role renamed
in between would not be restricted there. On one server it only refreshes names and prunes. Returns the number of
restricted roles. Raises 42501 (the caller is bound to scopes), 0A000 (called on a Citus worker), MB040 after
waiting membank.lock_timeout for another binding change (retryable).$$;

-- name: list_scope_bindings: the restricted roles and their scopes (a bound caller: only its own).
create or replace function membank.list_scope_bindings(role name default null)
returns table (role_name name, scope jsonb, create_time timestamptz)
language sql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
    select r.rolname, b.scope, coalesce(b.create_time, w.create_time)
    from membank_private.bound_roles as w
    inner join pg_catalog.pg_roles as r on r.oid = membank_private.local_role_oid(w.role_oid, w.role_name, w.worker_oids)
    left join membank_private.scope_bindings as b on b.role_oid = w.role_oid
    where (list_scope_bindings.role is null or r.rolname = list_scope_bindings.role)
      and (membank_private.bound_scopes() is null or w.role_oid = any(membank_private.bound_role_oids()))
    order by r.rolname, b.create_time nulls first, b.scope_id;
$$;

comment on function membank.list_scope_bindings(name) is
$$The restricted roles (bind_role_to_scope) and their bindings, of role when given: one row (role_name, scope,
create_time) per binding, and one row with scope null for a restricted role with no binding left (it reaches no
scope). A caller bound to scopes sees only the rows of the roles that restrict it. Raises nothing.
Columns:
- role_name: the restricted role.
- scope: a scope it is bound to (null for a restricted role with no binding left: it reaches nothing).
- create_time: when the binding was made.$$;

-- The views read through security definer functions that fix the scope
-- first (active_scope, once) and then read that one scope's rows: on Citus
-- the statement is then routed to the scope's shard, and runs there as
-- membank's owner (a view's own query is sent to the worker as the caller,
-- who has no privilege on membank_private, and its join by the setting
-- cannot be routed). On one server the rows are the same. The caller's own
-- conditions apply to what the function returned, so none of its functions
-- sees a row of another scope (the views stay security_barrier too).

-- name: scoped_memory_rows: the rows of membank.scoped_memories (the live memories of the active scope).
create or replace function membank_private.scoped_memory_rows()
returns table (
    name uuid, scope jsonb, memory_type text, fact text, structured_content jsonb, topics text[], metadata jsonb,
    revision integer, create_time timestamptz, update_time timestamptz, expire_time timestamptz
)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.active_scope();
begin
    if _scope is null then
        return;
    end if;
    return query
    select m.name, m.scope, m.memory_type, m.fact, m.structured_content, m.topics, m.metadata, m.revision,
           m.create_time, m.update_time, m.expire_time
    from membank_private.memories as m
    where m.scope_id = md5(_scope::text)::uuid and m.scope = _scope
      and (m.expire_time is null or m.expire_time > statement_timestamp());
end
$$;

-- name: scoped_profile_rows: the rows of membank.scoped_profiles (the live profile fields of the active scope).
create or replace function membank_private.scoped_profile_rows()
returns table (
    schema_id text, field text, value jsonb, memory_name uuid, revision integer, update_time timestamptz,
    expire_time timestamptz
)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.active_scope();
begin
    if _scope is null then
        return;
    end if;
    return query
    select m.structured_content ->> 'schema_id', m.structured_content ->> 'field', m.structured_content -> 'value',
           m.name, m.revision, m.update_time, m.expire_time
    from membank_private.memories as m
    where m.scope_id = md5(_scope::text)::uuid and m.memory_type = 'STRUCTURED_PROFILE' and m.scope = _scope
      and m.structured_content ? 'schema_id'
      and (m.expire_time is null or m.expire_time > statement_timestamp());
end
$$;

-- name: scoped_revision_rows: the rows of membank.scoped_revisions (every revision of the active scope, redacted
-- as list_revisions redacts those of an expired memory).
create or replace function membank_private.scoped_revision_rows()
returns table (
    memory_name uuid, revision integer, scope jsonb, action text, memory_type text, fact text, previous_fact text,
    structured_content jsonb, previous_structured_content jsonb, topics text[], metadata jsonb,
    expire_time timestamptz, labels jsonb, source_event_ids text[], extracted_memories jsonb,
    create_time timestamptz
)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.active_scope();
    _scope_id uuid;
begin
    if _scope is null then
        return;
    end if;
    _scope_id := md5(_scope::text)::uuid;
    -- The revisions of an expired memory are redacted as list_revisions
    -- redacts them (redact_revision): no fact, structured content, metadata
    -- or extraction context until the memory is purged or its expiry lifted.
    return query
    select r.memory_name, r.revision, r.scope, r.action, r.memory_type,
           case when x.name is null then r.fact end,
           case when x.name is null then r.previous_fact end,
           case when x.name is null then r.structured_content end,
           case when x.name is null then r.previous_structured_content end,
           r.topics,
           case when x.name is null then r.metadata else '{}'::jsonb end,
           r.expire_time, r.labels, r.source_event_ids,
           case when x.name is null then r.extracted_memories end,
           r.create_time
    from membank_private.memory_revisions as r
    left join membank_private.memories as x
        on x.scope_id = _scope_id and r.memory_name = x.name and x.expire_time <= statement_timestamp()
    where r.scope_id = _scope_id and r.scope = _scope;
end
$$;

create or replace view membank.scoped_memories with (security_barrier) as
select
    name,
    scope,
    memory_type,
    fact,
    structured_content,
    topics,
    metadata,
    revision,
    create_time,
    update_time,
    expire_time
from membank_private.scoped_memory_rows();

comment on view membank.scoped_memories is
'The live memories (both types) of the scope set with membank.set_scope; empty while none is set.';

create or replace view membank.scoped_profiles with (security_barrier) as
select
    schema_id,
    field,
    value,
    memory_name,
    revision,
    update_time,
    expire_time
from membank_private.scoped_profile_rows();

comment on view membank.scoped_profiles is
'One row per live profile field (schema_id, field, value) of the scope set with membank.set_scope; empty while none.';

create or replace view membank.scoped_revisions with (security_barrier) as
select
    memory_name,
    revision,
    scope,
    action,
    memory_type,
    fact,
    previous_fact,
    structured_content,
    previous_structured_content,
    topics,
    metadata,
    expire_time,
    labels,
    source_event_ids,
    extracted_memories,
    create_time
from membank_private.scoped_revision_rows();

comment on view membank.scoped_revisions is
'Every revision of every memory of the scope set with membank.set_scope (deleted ones too); empty while none is set.
Those of an expired memory show no fact, structured content, metadata or extraction context (as list_revisions).';
