-- 0005 upgrade: tool-permission tiers and compaction of old memories.

-- Compaction is a stage of an operation, like extraction and consolidation.
alter table membank_private.operations drop constraint operations_stage_check;
alter table membank_private.operations add constraint operations_stage_check
check (stage in ('EXTRACT', 'CONSOLIDATE', 'COMPACT', 'DONE'));

-- One tool-permission rule (tiers 2 and 3). project_id null: a global rule
-- of the scope (tier 3); else a rule of that project (tier 2). pattern is a
-- PostgreSQL regular expression (ARE) matched against one whole part of a
-- command; allow_operators lists the shell operators an ALLOW rule lets
-- through. Keyed by scope_id like memories, so erasure reaches it.
create table membank_private.tool_rules (
    id bigint generated always as identity primary key,
    scope jsonb not null,
    scope_id uuid not null generated always as (md5(scope::text)::uuid) stored,
    project_id text,
    tool_name text not null,
    pattern text not null,
    decision text not null check (decision in ('ALLOW', 'BLOCK')),
    allow_operators text[] not null default '{}',
    description text,
    revision integer not null default 1,
    create_time timestamptz not null default statement_timestamp(),
    update_time timestamptz not null default statement_timestamp()
);

create index tool_rules_scope_idx
on membank_private.tool_rules (scope_id, tool_name, project_id);

-- The audit log of rule changes: one row per create, update and delete,
-- with the rule as it was after the change (before it, for a delete).
create table membank_private.tool_rule_changes (
    id bigint generated always as identity primary key,
    rule_id bigint not null,
    scope_id uuid not null,
    scope jsonb not null,
    action text not null check (action in ('CREATED', 'UPDATED', 'DELETED')),
    rule jsonb not null,
    changed_by text not null default session_user,
    change_time timestamptz not null default statement_timestamp()
);

create index tool_rule_changes_scope_idx
on membank_private.tool_rule_changes (scope_id, change_time);

-- The log of permission decisions: who asked (scope, session, database
-- role), when, for which call, what was decided and which rule decided.
create table membank_private.tool_decisions (
    id bigint generated always as identity primary key,
    scope_id uuid not null,
    scope jsonb not null,
    project_id text,
    session_id text,
    tool_name text not null,
    command text,
    decision text not null check (decision in ('ALLOW', 'BLOCK', 'PROMPT_USER')),
    reason text not null,
    rule_id bigint,
    tier integer,
    asked_by text not null default session_user,
    decide_time timestamptz not null default statement_timestamp()
);

create index tool_decisions_scope_idx
on membank_private.tool_decisions (scope_id, decide_time);

create index tool_decisions_time_idx
on membank_private.tool_decisions (decide_time);

-- Tools exempt from permission checks in a scope (read-only memory tools).
create table membank_private.tool_permission_settings (
    scope_id uuid primary key generated always as (md5(scope::text)::uuid) stored,
    scope jsonb not null,
    exempt_tools text[] not null,
    update_time timestamptz not null default statement_timestamp()
);

create type membank.tool_rule as (
    id bigint,
    scope jsonb,
    project_id text,
    tool_name text,
    pattern text,
    decision text,
    allow_operators text [],
    description text,
    revision integer,
    create_time timestamptz,
    update_time timestamptz
);

create type membank.tool_decision as (
    decision text,
    reason text,
    rule_id bigint,
    tier integer
);
