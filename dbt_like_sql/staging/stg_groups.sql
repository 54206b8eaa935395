-- User groups present at the platform (disabled ones included, flagged).
SELECT
    id AS group_id,
    title AS group_title,
    unique_name,
    description,
    type AS group_type,
    coalesce(disabled, FALSE) AS is_disabled,
    nb_user,
    nb_active_user,
    first_loaded_at
FROM lms.groups
WHERE deleted_at IS NULL
