-- Lesson categories present at the platform.
with

source as (

    select * from {{ source('lms', 'categories') }}

),

renamed as (

    select
        id as category_id,
        name as category_name,
        description,
        owner_id

    from source
    where deleted_at is null

)

select * from renamed
