-- Users present at the platform (known through the groups they belong to).
SELECT
    id AS user_id,
    login,
    email,
    firstname,
    lastname,
    alias,
    locale,
    points,
    first_loaded_at
FROM lms.users
WHERE deleted_at IS NULL
