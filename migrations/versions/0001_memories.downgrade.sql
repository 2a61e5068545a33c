-- 0001 downgrade: remove membank from this database.
drop schema if exists membank cascade;
drop schema if exists membank_private cascade;
-- Roles are cluster-wide and may hold grants in other databases; they stay.

-- membank_extensions (pgvector and btree_gin, when membank installed them)
-- goes too, unless something outside membank still depends on them.
do $$
begin
    if exists (select from pg_catalog.pg_namespace where nspname = 'membank_extensions') then
        if exists (select from pg_catalog.pg_extension as e
                   inner join pg_catalog.pg_namespace as n on e.extnamespace = n.oid
                   where e.extname = 'vector' and n.nspname = 'membank_extensions') then
            drop extension vector restrict;
        end if;
        if exists (select from pg_catalog.pg_extension as e
                   inner join pg_catalog.pg_namespace as n on e.extnamespace = n.oid
                   where e.extname = 'btree_gin' and n.nspname = 'membank_extensions') then
            drop extension btree_gin restrict;
        end if;
        drop schema membank_extensions restrict;
    end if;
exception
    when dependent_objects_still_exist then
        raise notice 'membank_extensions stays: other objects depend on its extensions';
end
$$;
