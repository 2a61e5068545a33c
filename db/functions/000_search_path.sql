-- Applied first, in the same transaction as every other db/ file: puts the
-- schema that holds pgvector (wherever the DBA installed it; membank itself
-- installs it into membank_extensions) into this transaction's search_path,
-- so that functions declared with `set search_path from current` pin exactly
-- pg_catalog, that schema and pg_temp. Functions that do not use pgvector pin
-- pg_catalog, pg_temp.
--
-- A definer function resolves every unqualified name through that path, and
-- PostgreSQL picks the best-matching overload across all of its schemas: a
-- role that can CREATE in the pinned schema could plant
-- public.array_remove(text[], text) and have it run as the function's owner
-- (CVE-2018-1058). So the schema must be one in which only trusted roles
-- (superusers, the role installing membank, the database owner when it is
-- one of those) can create objects; otherwise the install refuses (MB030).
do $$
declare
    _schema name;
    _untrusted text;
begin
    select n.nspname into _schema
    from pg_catalog.pg_extension as e
    inner join pg_catalog.pg_namespace as n on e.extnamespace = n.oid
    where e.extname = 'vector';
    if _schema is null or _schema = 'pg_catalog' then
        return;
    end if;
    with holders as (
        select n.nspowner as role_id
        from pg_catalog.pg_namespace as n where n.nspname = _schema
        union
        select a.grantee
        from pg_catalog.pg_namespace as n,
            lateral pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) as a
        where n.nspname = _schema and a.privilege_type = 'CREATE'
    ), resolved as (
        -- pg_database_owner stands for the owner of the current database.
        select h.role_id as holder,
               case when h.role_id = 'pg_database_owner'::regrole
                    then (select d.datdba from pg_catalog.pg_database as d
                          where d.datname = pg_catalog.current_database())
                    else h.role_id end as role_id
        from holders as h
    )
    select string_agg(case when r.holder = 0 then 'PUBLIC' else r.holder::regrole::text end, ', '
                      order by r.holder)
    into _untrusted
    from resolved as r
    left join pg_catalog.pg_roles as ro on ro.oid = r.role_id
    where r.holder = 0
       or not (coalesce(ro.rolsuper, false) or r.role_id = (select oid from pg_catalog.pg_roles
                                                            where rolname = current_user));
    if _untrusted is not null then
        raise exception 'pgvector is installed in schema %, in which % can create objects', _schema, _untrusted
            using errcode = 'MB030',
                  detail = 'membank''s SECURITY DEFINER functions resolve names through the schema that '
                           'holds pgvector; an object planted there would run with their owner''s rights',
                  hint = format('revoke create on schema %I from those roles (e.g. `revoke create on schema %I '
                                'from public`), or move pgvector into a schema only trusted roles can create in '
                                '(`alter extension vector set schema ...`), then run `membank db upgrade`',
                                _schema, _schema);
    end if;
end
$$;

select
    set_config(
        'search_path', format('pg_catalog, %I, pg_temp', n.nspname), true
    ) as search_path
from pg_catalog.pg_extension as e
inner join pg_catalog.pg_namespace as n on e.extnamespace = n.oid
where e.extname = 'vector';
