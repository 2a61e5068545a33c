-- Tool-permission rules: create, change, delete and list them (the
-- operator's, membank_admin), the audit log of their changes, the log of
-- decisions, and the tools a scope exempts from checks. How rules decide is
-- in 100_tool_permissions.sql.

-- name: to_tool_rule: the public shape of a rule row.
create or replace function membank_private.to_tool_rule(r membank_private.tool_rules)
returns membank.tool_rule
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select row(r.id, r.scope, r.project_id, r.tool_name, r.pattern, r.decision, r.allow_operators, r.description,
               r.revision, r.create_time, r.update_time)::membank.tool_rule;
$$;

-- name: tool_rules_log_change: append every rule change to the audit log, bump revisions.
create or replace function membank_private.tool_rules_log_change()
returns trigger
language plpgsql
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.tool_rules := case when tg_op = 'DELETE' then old else new end;
begin
    insert into membank_private.tool_rule_changes (rule_id, scope_id, scope, action, rule)
    values (_row.id, _row.scope_id, _row.scope,
            case when tg_op = 'INSERT' then 'CREATED' when tg_op = 'UPDATE' then 'UPDATED' else 'DELETED' end,
            to_jsonb(membank_private.to_tool_rule(_row)));
    return null;
end
$$;

create or replace trigger tool_rules_log_change
after insert or update or delete on membank_private.tool_rules
for each row execute function membank_private.tool_rules_log_change();

-- name: set_exempt_tools: the tools exempt from permission checks in a scope (null: the defaults).
create or replace function membank.set_exempt_tools(scope jsonb, tools text[])
returns text[]
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _tools text [];
    _i integer := 0;
    _tool text;
begin
    if tools is null then
        delete from membank_private.tool_permission_settings as s
        where s.scope_id = md5(_scope::text)::uuid and s.scope = _scope;
        return membank_private.default_exempt_tools();
    end if;
    if cardinality(tools) > 100 then
        perform membank_private._raise_invalid('tools', 'must hold at most 100 tool names',
            'exempt only read-only tools; null restores the defaults');
    end if;
    foreach _tool in array tools loop
        perform membank_private.validate_tool_name(_tool, format('tools[%s]', _i));
        if _tool = '*' then
            perform membank_private._raise_invalid(format('tools[%s]', _i), 'cannot exempt every tool (*)',
                'list the read-only tools by name');
        end if;
        _i := _i + 1;
    end loop;
    _tools := array(select distinct t from unnest(tools) as t order by t);
    insert into membank_private.tool_permission_settings as s (scope_id, scope, exempt_tools, update_time)
    values (md5(_scope::text)::uuid, _scope, _tools, statement_timestamp())
    on conflict (scope_id) do update set exempt_tools = excluded.exempt_tools, update_time = excluded.update_time;
    return _tools;
end
$$;

comment on function membank.set_exempt_tools(jsonb, text[]) is
$$Set the tools exempt from permission checks in an exact scope (check_tool_permission answers ALLOW, tier 0, without
reading rules): tools is an array of at most 100 tool names (not *), or null for the defaults get_memory,
list_memories, load_memory, preload_memory, retrieve_memories (read-only memory tools). Returns the exempt tools now in
force. Raises 22023 naming the argument.$$;

-- name: create_tool_rule: store a permission rule (its pattern compiled and bounded first).
create or replace function membank.create_tool_rule(
    scope jsonb,
    tool_name text,
    pattern text,
    decision text,
    project_id text default null,
    allow_operators text[] default '{}',
    description text default null
) returns membank.tool_rule
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.tool_rules;
    _scope jsonb;
    _project text;
    _tool text;
    _pattern text;
    _operators text[];
begin
    if decision is null or upper(decision) not in ('ALLOW', 'BLOCK') then
        perform membank_private._raise_invalid('decision', format('must be ALLOW or BLOCK, got %s',
                                                                  coalesce(to_jsonb(decision)::text, 'null')),
            'no rule for a call means PROMPT_USER; rules only ALLOW or BLOCK');
    end if;
    if description is not null and length(description) > 2000 then
        perform membank_private._raise_invalid('description', 'must be at most 2000 characters', 'say why, briefly');
    end if;
    -- Validated into variables first (Citus evaluates calls in INSERT ... VALUES on the coordinator).
    _scope := membank_private.validate_scope(scope);
    _project := membank_private.validate_project_id(project_id);
    _tool := membank_private.validate_tool_name(tool_name);
    _pattern := membank_private.validate_tool_pattern(pattern);
    _operators := membank_private.validate_allow_operators(allow_operators);
    insert into membank_private.tool_rules as r (
        scope_id, scope, project_id, tool_name, pattern, decision, allow_operators, description
    ) values (
        md5(_scope::text)::uuid, _scope, _project, _tool, _pattern, upper(decision), _operators, description
    )
    returning * into _row;
    return membank_private.to_tool_rule(_row);
end
$$;

comment on function membank.create_tool_rule(jsonb, text, text, text, text, text[], text) is
$$Store a tool-permission rule of an exact scope: tool_name (1..128 characters, * for every tool), pattern (a
PostgreSQL regular expression of 1..1000 characters matched case-sensitively against a whole command part, as
^(?:pattern)$; compiled now, back-references refused), decision ALLOW or BLOCK, project_id (null: a global rule, tier
3; else a project rule, tier 2), allow_operators (for ALLOW: the shell operators it lets through, of ; && || | &
newline $( ` > <; default none), description. Returns the rule (id, revision 1); the change is logged. Raises 22023
naming the argument.$$;

-- name: update_tool_rule: change a rule's pattern, decision, operators or description (a new revision).
create or replace function membank.update_tool_rule(
    id bigint,
    scope jsonb,
    pattern text default null,
    decision text default null,
    allow_operators text[] default null,
    description text default null
) returns membank.tool_rule
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _row membank_private.tool_rules;
    _pattern text;
    _operators text [];
begin
    if decision is not null and upper(decision) not in ('ALLOW', 'BLOCK') then
        perform membank_private._raise_invalid('decision', format('must be ALLOW or BLOCK, got %s', to_jsonb(decision)),
            'null keeps the decision');
    end if;
    if description is not null and length(description) > 2000 then
        perform membank_private._raise_invalid('description', 'must be at most 2000 characters', 'say why, briefly');
    end if;
    -- Validated before the UPDATE: Citus evaluates every function call of
    -- its SET list on the coordinator, branches not taken included.
    if update_tool_rule.pattern is not null then
        _pattern := membank_private.validate_tool_pattern(update_tool_rule.pattern);
    end if;
    if update_tool_rule.allow_operators is not null then
        _operators := membank_private.validate_allow_operators(update_tool_rule.allow_operators);
    end if;
    update membank_private.tool_rules as r
    set pattern = coalesce(_pattern, r.pattern),
        decision = coalesce(upper(update_tool_rule.decision), r.decision),
        allow_operators = coalesce(_operators, r.allow_operators),
        description = coalesce(update_tool_rule.description, r.description),
        revision = r.revision + 1, update_time = statement_timestamp()
    where r.id = update_tool_rule.id and r.scope_id = md5(_scope::text)::uuid and r.scope = _scope
    returning * into _row;
    if _row.id is null then
        raise exception 'id: no tool rule % in this scope', update_tool_rule.id
            using errcode = 'no_data_found', detail = 'argument: id', hint = 'list_tool_rules shows the scope''s rules';
    end if;
    return membank_private.to_tool_rule(_row);
end
$$;

comment on function membank.update_tool_rule(bigint, jsonb, text, text, text[], text) is
$$Change the tool rule id of an exact scope: each of pattern, decision, allow_operators and description that is not
null replaces the stored one (validated as in create_tool_rule). Returns the rule with its revision bumped; the change
is logged. Raises P0002 (no such rule in this scope), 22023 naming the argument.$$;

-- name: delete_tool_rule: remove a rule (the audit log keeps it).
create or replace function membank.delete_tool_rule(id bigint, scope jsonb)
returns membank.tool_rule
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _row membank_private.tool_rules;
begin
    delete from membank_private.tool_rules as r
    where r.id = delete_tool_rule.id and r.scope_id = md5(_scope::text)::uuid and r.scope = _scope
    returning * into _row;
    if _row.id is null then
        raise exception 'id: no tool rule % in this scope', delete_tool_rule.id
            using errcode = 'no_data_found', detail = 'argument: id', hint = 'list_tool_rules shows the scope''s rules';
    end if;
    return membank_private.to_tool_rule(_row);
end
$$;

comment on function membank.delete_tool_rule(bigint, jsonb) is
$$Delete the tool rule id of an exact scope and return it as it was; the audit log (list_tool_rule_changes) keeps it.
Raises P0002 (no such rule in this scope), 22023 (bad scope).$$;

-- name: list_tool_rules: the rules of a scope (one project's and the global ones, or all).
create or replace function membank.list_tool_rules(scope jsonb, project_id text default null)
returns setof membank.tool_rule
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _project text := membank_private.validate_project_id(project_id);
    _row membank_private.tool_rules;
begin
    -- Row by row: on Citus a whole row passed to a function inside the query
    -- would arrive on the shard as the shard's row type.
    for _row in
        select r.*
        from membank_private.tool_rules as r
        where r.scope_id = md5(_scope::text)::uuid and r.scope = _scope
          and (_project is null or r.project_id is null or r.project_id = _project)
        order by r.project_id nulls last, r.id
    loop
        return next membank_private.to_tool_rule(_row);
    end loop;
end
$$;

comment on function membank.list_tool_rules(jsonb, text) is
$$The tool rules of an exact scope: with project_id, that project's rules (tier 2) and the global ones (tier 3);
without, every rule. Project rules first, then by id. Raises 22023 naming the argument.$$;

-- name: list_tool_rule_changes: the audit log of a scope's rule changes, newest first.
create or replace function membank.list_tool_rule_changes(
    scope jsonb, id bigint default null, max_changes integer default 100
) returns table (rule_id bigint, action text, rule jsonb, changed_by text, change_time timestamptz)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
begin
    if max_changes is null or max_changes not between 1 and 10000 then
        perform membank_private._raise_invalid('max_changes', 'must be between 1 and 10000', 'the default is 100');
    end if;
    return query
    select c.rule_id, c.action, c.rule, c.changed_by, c.change_time
    from membank_private.tool_rule_changes as c
    where c.scope_id = md5(_scope::text)::uuid and c.scope = _scope
      and (list_tool_rule_changes.id is null or c.rule_id = list_tool_rule_changes.id)
    order by c.id desc
    limit max_changes;
end
$$;

comment on function membank.list_tool_rule_changes(jsonb, bigint, integer) is
$$The audit log of the tool rules of an exact scope, newest first, at most max_changes (1..10000, default 100); only
those of the rule id when given. Each change: rule_id, action (CREATED, UPDATED, DELETED), the rule after the change (before it,
for DELETED), the database role that made it, and when. Raises 22023 naming the argument.
Columns:
- rule_id: the rule changed.
- action: CREATED, UPDATED or DELETED.
- rule: the rule after the change as JSON (before it, for DELETED).
- changed_by: the database role that made the change.
- change_time: when.$$;

-- name: list_tool_decisions: the permission decisions logged for a scope, newest first.
create or replace function membank.list_tool_decisions(scope jsonb, max_decisions integer default 100)
returns table (
    project_id text, session_id text, tool_name text, command text, decision text, reason text, rule_id bigint,
    tier integer, asked_by text, decide_time timestamptz
)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
begin
    if max_decisions is null or max_decisions not between 1 and 10000 then
        perform membank_private._raise_invalid('max_decisions', 'must be between 1 and 10000', 'the default is 100');
    end if;
    return query
    select d.project_id, d.session_id, d.tool_name, d.command, d.decision, d.reason, d.rule_id, d.tier, d.asked_by,
           d.decide_time
    from membank_private.tool_decisions as d
    where d.scope_id = md5(_scope::text)::uuid and d.scope = _scope
    order by d.id desc
    limit max_decisions;
end
$$;

comment on function membank.list_tool_decisions(jsonb, integer) is
$$The tool-permission decisions of an exact scope, newest first, at most max_decisions (1..10000, default 100): project,
session, tool, command (first 2000 characters), decision, reason, deciding rule and tier, the database role that asked,
and when. Raises 22023 naming the argument.
Columns:
- project_id: the project the call was checked for (null: none).
- session_id: the session (null: none).
- tool_name: the tool.
- command: the command checked (its first 2000 characters).
- decision: ALLOW, BLOCK or PROMPT_USER.
- reason: why, in words.
- rule_id: the deciding rule (null: none).
- tier: 0 exempt tool, 1 allow-once grant, 2 project rule, 3 global rule (null: no rule decided).
- asked_by: the database role that asked.
- decide_time: when.$$;
