-- Lesson categories present at the platform.
SELECT
    id AS category_id,
    name AS category_name,
    description,
    owner_id
FROM lms.categories
WHERE deleted_at IS NULL
