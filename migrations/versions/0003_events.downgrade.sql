-- 0003 downgrade: remove sessions and events.
drop function if exists membank.append_events(jsonb, text, jsonb);
drop function if exists membank.list_events(jsonb, text, timestamptz, timestamptz, integer);
drop function if exists membank_private.validate_events(jsonb);
drop table if exists membank_private.events;
drop table if exists membank_private.sessions;
drop type if exists membank.event;
