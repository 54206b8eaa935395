-- Current group memberships (a membership that vanished at the platform is left out).
SELECT
    group_id,
    user_id,
    first_loaded_at AS member_since_load
FROM lms.group_members
WHERE deleted_at IS NULL
