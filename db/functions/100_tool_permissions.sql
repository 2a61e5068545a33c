-- Tool-permission tiers: an agent asks before it runs a tool call (e.g. a
-- shell command) and membank answers ALLOW, BLOCK or PROMPT_USER with the
-- reason, the rule that decided and its tier. It fails closed: no matching
-- rule, or any error, is PROMPT_USER, never ALLOW.
--
-- Tiers, in the order they decide:
--   0  exempt tools of the scope (read-only memory tools): ALLOW unchecked;
--   1  allow once: an operator approved this exact call. The grant lives in
--      Valkey (the client consumes it atomically with GETDEL and passes
--      allow_once => true); it answers what would be PROMPT_USER or ALLOW,
--      never lifts a BLOCK;
--   2  project rules (project_id = the caller's project);
--   3  global rules of the scope (project_id null).
-- Within a tier BLOCK beats ALLOW; a tier that matches decides, so a
-- project ALLOW beats a global BLOCK for the same part.
--
-- Why not the obvious `command ~ pattern`: a substring match lets
-- `rm -rf / ; pytest x` through an allow rule `pytest .*`. Here a pattern
-- must match a whole part (it is anchored as ^(?:pattern)$), and a command is
-- split at the shell's chaining and substitution operators (; && || | &
-- newline $( `) into parts that are decided one by one; the strictest answer
-- wins (BLOCK > PROMPT_USER > ALLOW). An ALLOW rule lets a part through only
-- when the whole command uses no operator (those above and the redirections
-- > <) beyond the rule's allow_operators. A BLOCK rule is matched against each
-- part and against the whole command. Operators are recognised anywhere,
-- inside quotes too: stricter than the shell, never laxer.
--
-- Matching is case-sensitive (commands are: `RM` is not `rm`), uses
-- PostgreSQL's regular expressions (ARE), and is bounded: patterns are
-- compiled when stored (what PostgreSQL refuses is refused, at most 1000
-- characters) and may not hold back-references, the one construct that
-- makes PostgreSQL's engine backtrack; without them it runs a DFA whose time
-- is linear in the command (Spencer's engine, as in Tcl), so `(a+)+$` is
-- decided at once. Commands are bounded (16384 characters, 64 parts).

-- name: shell_operators: the shell operators a command uses, by name (; && || | & newline $( ` > <).
create or replace function membank_private.shell_operators(command text)
returns text[]
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(array_agg(distinct case m[1] when E'\n' then 'newline' when E'\r' then 'newline' else m[1] end
                              order by case m[1] when E'\n' then 'newline' when E'\r' then 'newline' else m[1] end),
                    '{}')
    from regexp_matches(coalesce(command, ''), E'(\\|\\||&&|\\$\\(|[;|&`<>\\n\\r])', 'g') as m;
$$;

-- name: shell_parts: a command split at its chaining and substitution operators, each part trimmed.
create or replace function membank_private.shell_parts(command text)
returns text[]
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(array_agg(btrim(p, E' \t') order by n) filter (where btrim(p, E' \t') <> ''),
                    array[btrim(coalesce(command, ''), E' \t')])
    from regexp_split_to_table(coalesce(command, ''), E'\\|\\||&&|\\$\\(|[;|&`\\n\\r]') with ordinality as x (p, n);
$$;

-- name: validate_tool_pattern: a rule's pattern, compiled as it is used (22023 naming pattern).
create or replace function membank_private.validate_tool_pattern(pattern text)
returns text
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if pattern is null or length(pattern) not between 1 and 1000 then
        perform membank_private._raise_invalid('pattern', 'must be a regular expression of 1 to 1000 characters',
            'e.g. ''pytest .*''; it must match a whole command part (it is anchored)');
    end if;
    if pattern ~ '\\[1-9]' then
        perform membank_private._raise_invalid('pattern',
            'back-references (\1 .. \9) are not allowed: they make matching backtrack without bound',
            'write the alternatives out, e.g. (a|b) instead of (a)\1');
    end if;
    begin
        perform '' ~ ('^(?:' || pattern || ')$');
    exception when invalid_regular_expression then
        perform membank_private._raise_invalid('pattern',
            format('PostgreSQL refuses this regular expression: %s', sqlerrm),
            'use PostgreSQL ARE syntax; the pattern is wrapped as ^(?:pattern)$, so no (?flags) prefix');
    end;
    return pattern;
end
$$;

-- name: validate_allow_operators: the shell operators an ALLOW rule may let through (22023).
create or replace function membank_private.validate_allow_operators(allow_operators text[])
returns text[]
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _bad text;
begin
    select o into _bad from unnest(coalesce(allow_operators, '{}')) as o
    where o is null or o not in (';', '&&', '||', '|', '&', 'newline', '$(', '`', '>', '<')
    limit 1;
    if found then
        perform membank_private._raise_invalid('allow_operators', format('unknown operator %s', to_jsonb(_bad)),
            'operators are ; && || | & newline $( ` > <');
    end if;
    return array(select distinct o from unnest(coalesce(allow_operators, '{}')) as o order by o);
end
$$;

-- name: validate_tool_name: a tool name, or * for every tool (22023 naming the argument).
create or replace function membank_private.validate_tool_name(tool_name text, argument text default 'tool_name')
returns text
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if tool_name is null or length(tool_name) not between 1 and 128 or btrim(tool_name) <> tool_name then
        perform membank_private._raise_invalid(argument, 'must be 1 to 128 characters without surrounding blanks',
            'the name the agent calls the tool by, e.g. run_shell; * in a rule means every tool');
    end if;
    return tool_name;
end
$$;

-- name: validate_project_id: null (global) or 1..200 characters (22023).
create or replace function membank_private.validate_project_id(project_id text)
returns text
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if project_id is not null and length(project_id) not between 1 and 200 then
        perform membank_private._raise_invalid('project_id', 'must be null (global) or 1 to 200 characters',
            'e.g. the repository or workspace the agent works in');
    end if;
    return project_id;
end
$$;

-- name: decide_part: one command part against one tier's rules: (decision, reason, rule_id) or null.
create or replace function membank_private.decide_part(
    rules membank_private.tool_rules[], part text, command text, operators text[]
) returns membank.tool_decision
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _rule membank_private.tool_rules;
    _near membank_private.tool_rules;
begin
    select * into _rule from unnest(rules) as r
    where r.decision = 'BLOCK'
      and (part ~ ('^(?:' || r.pattern || ')$') or command ~ ('^(?:' || r.pattern || ')$'))
    order by r.id limit 1;
    if _rule.id is not null then
        return row('BLOCK', format('rule %s blocks %s', _rule.id, to_jsonb(part)), _rule.id, null)::membank.tool_decision;
    end if;
    select * into _rule from unnest(rules) as r
    where r.decision = 'ALLOW' and part ~ ('^(?:' || r.pattern || ')$') and r.allow_operators @> operators
    order by r.id limit 1;
    if _rule.id is not null then
        return row('ALLOW', format('rule %s allows %s', _rule.id, to_jsonb(part)), _rule.id, null)::membank.tool_decision;
    end if;
    select * into _near from unnest(rules) as r
    where r.decision = 'ALLOW' and part ~ ('^(?:' || r.pattern || ')$')
    order by r.id limit 1;
    if _near.id is not null then
        -- The part matches, but the command chains or redirects past what the rule allows.
        return row('PROMPT_USER', format('rule %s would allow %s, but the command uses %s, which it does not allow',
                                         _near.id, to_jsonb(part),
                                         array_to_string(array(select o from unnest(operators) as o
                                                               where o <> all(_near.allow_operators)), ' ')),
                   _near.id, null)::membank.tool_decision;
    end if;
    return null;
end
$$;

-- name: permission_check_budget: the most work (characters matched, see permission_check_work) one check may do.
-- About 0.1 s of regular-expression matching on this project's 2-core test
-- machine; an ordinary check (a few parts, tens of rules) is under 1% of it.
create or replace function membank_private.permission_check_budget()
returns bigint
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select 1000000::bigint;
$$;

-- name: permission_check_work: the work of deciding parts against rules, in characters matched.
-- Every part is matched against every rule of its tiers (pattern compiled,
-- then run over the part and, for BLOCK rules, the whole command): the cost
-- of one match grows with the pattern's length and the text's.
create or replace function membank_private.permission_check_work(
    parts text[], command text, patterns text[]
) returns bigint
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(cardinality(parts), 0)::bigint
           * coalesce((select sum(length(p) + length(coalesce(command, ''))) from unnest(patterns) as p), 0)::bigint;
$$;

-- name: scope_id: the id membank keys a scope's data by (md5 of its canonical JSON, as a uuid).
create or replace function membank.scope_id(scope jsonb)
returns uuid
language sql
immutable
security definer
set search_path to pg_catalog, pg_temp
as $$
    select md5(membank_private.validate_scope(scope)::text)::uuid;
$$;

comment on function membank.scope_id(jsonb) is
$$The id membank keys an exact scope's data by: md5 of the scope's canonical jsonb text (keys sorted), as a uuid; the
same for any key order. Clients use it to key what they keep outside PostgreSQL (allow-once grants in Valkey), so that
erasure of the scope can find it. Raises 22023 (bad scope).$$;

-- name: check_tool_permission: ALLOW, BLOCK or PROMPT_USER for one tool call, with the reason, rule and tier.
create or replace function membank.check_tool_permission(
    scope jsonb,
    project_id text,
    tool_name text,
    command text,
    session_id text default null,
    allow_once boolean default false,
    grant_error text default null
) returns membank.tool_decision
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _scope_id uuid := md5(_scope::text)::uuid;
    _tool text := membank_private.validate_tool_name(tool_name);
    _project text := membank_private.validate_project_id(project_id);
    _command text := btrim(coalesce(command, ''), E' \t\r\n');
    _exempt text [];
    _result membank.tool_decision;
    _part_result membank.tool_decision;
    _near membank.tool_decision;
    _operators text [];
    _parts text [];
    _part text;
    _tier integer;
    _rules membank_private.tool_rules [];
    _project_rules membank_private.tool_rules [];
    _global_rules membank_private.tool_rules [];
    _rule membank_private.tool_rules;
    _work bigint;
begin
    if session_id is not null and length(session_id) not between 1 and 200 then
        perform membank_private._raise_invalid('session_id', 'must be null or 1 to 200 characters',
            'the agent session the call belongs to');
    end if;
    select s.exempt_tools into _exempt from membank_private.tool_permission_settings as s
    where s.scope_id = _scope_id and s.scope = _scope;
    if _tool = any(coalesce(_exempt, membank_private.default_exempt_tools())) then
        _result := row('ALLOW', format('%s is exempt from permission checks in this scope', _tool), null, 0)::membank.tool_decision;
    elsif length(_command) > 16384 then
        _result := row('PROMPT_USER', 'the command is longer than 16384 characters; ask the user', null, null)::membank.tool_decision;
    else
        begin
            _operators := membank_private.shell_operators(_command);
            _parts := membank_private.shell_parts(_command);
            -- The rules of both tiers, read once (not once per part).
            -- Row by row (on Citus a whole row read inside the query comes
            -- from the shard, whose row type the coordinator cannot name).
            _project_rules := '{}';
            _global_rules := '{}';
            for _rule in
                select r.* from membank_private.tool_rules as r
                where r.scope_id = _scope_id and r.scope = _scope and r.tool_name in (_tool, '*')
                  and (r.project_id is null or r.project_id = _project)
                order by r.id
            loop
                if _rule.project_id is null then
                    _global_rules := _global_rules || _rule;
                else
                    _project_rules := _project_rules || _rule;
                end if;
            end loop;
            _work := membank_private.permission_check_work(_parts, _command,
                                                           array(select r.pattern from unnest(_project_rules || _global_rules) as r));
            if cardinality(_parts) > 64 then
                _result := row('PROMPT_USER', format('the command has %s parts (at most 64 are checked); ask the user',
                                                     cardinality(_parts)), null, null)::membank.tool_decision;
            elsif _work > membank_private.permission_check_budget() then
                -- Fail closed on work, not on time: the answer never depends on the machine's speed.
                _result := row('PROMPT_USER', format(
                    'checking the command would match %s characters of patterns and text (at most %s are matched); '
                    'ask the user', _work, membank_private.permission_check_budget()), null, null)::membank.tool_decision;
            else
                foreach _part in array _parts loop
                    _part_result := null;
                    _near := null;
                    foreach _tier in array array[2, 3] loop
                        continue when _tier = 2 and _project is null;
                        _rules := case when _tier = 2 then _project_rules else _global_rules end;
                        _part_result := membank_private.decide_part(_rules, _part, _command, _operators);
                        if _part_result.decision in ('BLOCK', 'ALLOW') then
                            _part_result.tier := _tier;
                            exit;
                        end if;
                        if _near.decision is null then
                            _near := _part_result;
                        end if;
                        _part_result := null;
                    end loop;
                    if _part_result.decision is null then
                        _part_result := case when _near.decision is not null then _near else row(
                            'PROMPT_USER', format('no rule decides %s; ask the user', to_jsonb(_part)), null, null
                        )::membank.tool_decision end;
                    end if;
                    -- The strictest answer over the parts wins; the first part decides a tie.
                    if _result.decision is null
                       or array_position(array['ALLOW', 'PROMPT_USER', 'BLOCK'], _part_result.decision)
                          > array_position(array['ALLOW', 'PROMPT_USER', 'BLOCK'], _result.decision) then
                        _result := _part_result;
                    end if;
                end loop;
            end if;
        exception when others then
            -- A bad rule (or anything else) never allows: ask the user, say why.
            _result := row('PROMPT_USER', format('the rules could not be evaluated (%s): ask the user', sqlerrm),
                           null, null)::membank.tool_decision;
        end;
        if _result.decision <> 'BLOCK' and grant_error is not null then
            _result := row('PROMPT_USER', format('the allow-once store failed (%s): ask the user', left(grant_error, 500)),
                           null, null)::membank.tool_decision;
        elsif _result.decision <> 'BLOCK' and coalesce(allow_once, false) then
            _result := row('ALLOW', 'an operator allowed this exact call once', null, 1)::membank.tool_decision;
        end if;
    end if;
    insert into membank_private.tool_decisions (
        scope, scope_id, project_id, session_id, tool_name, command, decision, reason, rule_id, tier
    ) values (
        _scope, _scope_id, _project, check_tool_permission.session_id, _tool, left(_command, 2000),
        _result.decision, _result.reason, _result.rule_id, _result.tier
    );
    return _result;
end
$$;

comment on function membank.check_tool_permission(jsonb, text, text, text, text, boolean, text) is
$$Decide whether an agent may run one tool call: returns (decision ALLOW | BLOCK | PROMPT_USER, reason, rule_id, tier:
0 exempt tool, 1 allow-once grant, 2 project rule, 3 global rule, null when no rule decided). command (the shell
command, or the call's canonical arguments) is split at ; && || | & newline $( and ` into parts; each part is decided
by the project rules of project_id (tier 2), else the scope's global rules (tier 3): within a tier BLOCK beats ALLOW; a
pattern matches a whole part (anchored), case-sensitively; an ALLOW rule lets a part through only when the command uses
no shell operator (those above and > <) outside the rule's allow_operators; a BLOCK rule also matches the whole
command. The strictest part wins (BLOCK > PROMPT_USER > ALLOW). No matching rule, more than 64 parts, a command over
16384 characters, a check whose work (parts x the sum over the tool's rules of pattern length + command length) is over
1,000,000 characters, or an error evaluating the rules give PROMPT_USER (fail closed). allow_once => true says the client
consumed an operator's grant for this exact call (tier 1: ALLOW unless a rule BLOCKs); grant_error (the grant store
failed) gives PROMPT_USER unless a rule BLOCKs. Every decision is logged (membank.list_tool_decisions). Raises 22023
naming the argument (bad scope, tool_name, project_id or session_id).$$;

-- name: default_exempt_tools: the read-only memory tools exempt from checks unless a scope says otherwise.
create or replace function membank_private.default_exempt_tools()
returns text[]
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select array['get_memory', 'list_memories', 'load_memory', 'preload_memory', 'retrieve_memories'];
$$;
