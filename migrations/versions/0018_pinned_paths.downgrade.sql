-- Back to 0017: the two-column compact_scopes of 0017's db/ files, which
-- cannot replace the three-column one in place: it goes here, and applying
-- 0017's db/ files (membank db upgrade of that version) creates it again.
drop function if exists membank.compact_scopes(jsonb, interval, integer, integer);
